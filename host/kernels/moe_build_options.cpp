#include "kernels/moe_build_options.hpp"

#include <cstdlib>
#include <string>

#include "cl/exact_division.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

bool has_fp32_denormals(const Context& ctx) {
  cl_device_fp_config config = 0;
  check_cl(ctx.device().getInfo(CL_DEVICE_SINGLE_FP_CONFIG, &config), "querying the fp32 capabilities of {}",
           ctx.info().name);
  return (config & CL_FP_DENORM) != 0;
}

// Whether this process's processor has AVX-512 BW, VBMI and BF16 (a CPU OpenCL device runs on it).
bool host_has_avx512_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace

bool moe_bf16_dot_enabled(const Context& ctx) {
  const char* env = std::getenv("FP4CL_MOE_BF16_DOT");
  const std::string choice = env ? env : "";
  if (!choice.empty() && choice != "0" && choice != "1")
    fail("FP4CL_MOE_BF16_DOT = '{}': expected 0 (off) or 1 (on; the CPU must have AVX-512 BF16)", choice);
  if (choice == "0") return false;
  const bool can = ctx.info().kind == DeviceKind::cpu && host_has_avx512_bf16();
  if (choice == "1" && !can)
    fail("FP4CL_MOE_BF16_DOT = 1, but {} is not a CPU device on a processor with AVX-512 BW, VBMI and BF16",
         ctx.info().name);
  return can;
}

MoeNumerics moe_numerics(const Context& ctx, bool exact_division_needed) {
  MoeNumerics n;
  const DeviceInfo& info = ctx.info();
  // Without exact division only W4A4 NVFP4 fails (add_exact_division throws, naming the device).
  if (exact_division_needed || has_exact_division(info)) add_exact_division(n.options, info, "the MoE kernels");
  const char* decode = std::getenv("FP4CL_MOE_E2M1_DECODE");
  const std::string choice = decode ? decode : "";
  if (!choice.empty() && choice != "exact" && choice != "subnormal")
    fail("FP4CL_MOE_E2M1_DECODE = '{}': expected 'exact' or 'subnormal'", choice);
  const bool denormals = has_fp32_denormals(ctx);
  if (choice == "subnormal" && !denormals)
    fail("FP4CL_MOE_E2M1_DECODE = subnormal, but {} flushes fp32 denormals", info.name);
  if (choice == "exact" || !denormals) {
    n.options.define("MOE_E2M1_NO_DENORM");
    n.e2m1_exp = 0;
    log::info("MoE: E2M1 codes decoded to exact values ({})",
              denormals ? "FP4CL_MOE_E2M1_DECODE=exact" : "the device flushes fp32 denormals");
  }
  return n;
}

}  // namespace fp4cl
