#include "kernels/cpu_bf16_dot.hpp"

#include <map>
#include <mutex>
#include <string>

#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"
#include "support/env_switch.hpp"
#include "support/log.hpp"

namespace fp4cl {

bool cpu_has_avx512_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

namespace {

std::mutex probe_mutex;
std::map<std::string, std::string> probe_errors;  // device key -> "" (builds) or the compiler's error

// "" when the device's OpenCL compiler builds kernels/bf16_dot_probe.cl with FP4_DPBF16, else its
// error. Once per device (platform, name and driver) and process: a failed build is not cached
// by the program cache, and every layer asks several times. Failures other than the compiler's
// refusal (CL_BUILD_PROGRAM_FAILURE: out of resources, an injected fault) are thrown, not kept.
std::string bf16_dot_build_error(const Context& ctx) {
  const DeviceInfo& info = ctx.info();
  const std::string key = info.platform_name + '\n' + info.name + '\n' + info.driver_version;
  std::lock_guard<std::mutex> lock(probe_mutex);
  if (const auto it = probe_errors.find(key); it != probe_errors.end()) return it->second;
  std::string error;
  try {
    ctx.programs().program("bf16_dot_probe.cl", BuildOptions().define("FP4_DPBF16"));
  } catch (const Error& e) {
    if (e.cl_status() != CL_BUILD_PROGRAM_FAILURE) throw;
    error = e.what();
    if (error.empty()) error = "the build failed";
    log::info("AVX-512 BF16 dot products off on {}: its OpenCL compiler does not build them ({})", info.name, error);
  }
  return probe_errors.emplace(key, error).first->second;
}

std::string choice_of(const char* env) {
  return env_switch(env, {"0", "1"}, "0 (off) or 1 (on; the CPU must have AVX-512 BF16)");
}

}  // namespace

std::string cpu_bf16_dot_unavailable(const Context& ctx) {
  if (ctx.info().kind != DeviceKind::cpu) return "not a CPU device";
  if (!cpu_has_avx512_bf16()) return "this processor lacks AVX-512 BW, VBMI or BF16";
  const std::string error = bf16_dot_build_error(ctx);
  return error.empty() ? "" : "its OpenCL compiler does not build them: " + error;
}

bool cpu_bf16_dot_enabled(const Context& ctx, const char* env) {
  const std::string choice = choice_of(env);
  if (choice == "0") return false;
  const bool can = ctx.info().kind == DeviceKind::cpu && cpu_has_avx512_bf16();
  if (choice == "1" && !can)
    fail("{} = 1, but {} is not a CPU device on a processor with AVX-512 BW, VBMI and BF16", env, ctx.info().name);
  if (!can) return false;
  const std::string error = bf16_dot_build_error(ctx);
  if (choice == "1" && !error.empty())
    fail("{} = 1, but the OpenCL compiler of {} does not build the AVX-512 BF16 dot products: {}", env,
         ctx.info().name, error);
  return error.empty();
}

bool cpu_bf16_dot_required(const char* env) { return choice_of(env) == "1"; }

namespace detail {
void forget_bf16_dot_probes() {
  std::lock_guard<std::mutex> lock(probe_mutex);
  probe_errors.clear();
}
}  // namespace detail

}  // namespace fp4cl
