#include "kernels/moe_build_options.hpp"

#include <fmt/format.h>

#include <string>

#include "cl/exact_division.hpp"
#include "kernels/cpu_bf16_dot.hpp"
#include "kernels/cpu_denormal_speed.hpp"
#include "kernels/w4a16_int_switch.hpp"
#include "support/check.hpp"
#include "support/env_switch.hpp"
#include "support/log.hpp"

namespace fp4cl {

bool moe_bf16_dot_enabled(const Context& ctx) { return cpu_bf16_dot_enabled(ctx, "FP4CL_MOE_BF16_DOT"); }

namespace {

std::string moe_int_dot_choice() {
  return env_switch("FP4CL_MOE_INT_DOT", {"0", "1", "portable"},
                    "0 (the float decode), 1 (integer dot products where they apply, the default) or portable (the "
                    "integer path without x86 builtins)");
}

}  // namespace

bool moe_int_dot_enabled(const Context& ctx, const QuantScheme& scheme, int vec, int group) {
  const std::string choice = moe_int_dot_choice();
  return choice != "0" && ctx.info().kind == DeviceKind::cpu &&
         (!scheme.w4a16() || (w4a16_int_enabled() && ctx.info().fp32_denormals)) && vec == 8 && group == 8 &&
         !moe_bf16_dot_enabled(ctx);
}

void add_moe_int_dot(BuildOptions& options, const Context& ctx, const QuantScheme& scheme, int vec, int group) {
  if (!moe_int_dot_enabled(ctx, scheme, vec, group)) return;
  options.define(scheme.w4a16() ? "MOE_INT_PLANES" : "MOE_INT_CODES");
  if (moe_int_dot_choice() == "portable") options.define("MOE_INT_NO_X86");
}

bool moe_scaled_x_enabled(const Context& ctx, const QuantScheme& scheme, int vec, int group, int e2m1_exp) {
  const std::string choice = env_switch("FP4CL_MOE_SCALED_X", {"0", "1"},
                                        "0 (the float decode with a scale multiply per weight) or 1 (scaled "
                                        "activations where they apply, the default)");
  return choice != "0" && ctx.info().kind == DeviceKind::cpu && scheme.weight == WeightFormat::nvfp4 &&
         scheme.w4a16() && vec == 8 && group == 8 && e2m1_exp == -126 && !moe_bf16_dot_enabled(ctx) &&
         !moe_int_dot_enabled(ctx, scheme, vec, group);
}

int moe_x_form_bytes(const Context& ctx, const QuantScheme& scheme, int vec, int group, int e2m1_exp) {
  if (moe_int_dot_enabled(ctx, scheme, vec, group)) return scheme.w4a16() ? 6 : 4;
  return moe_scaled_x_enabled(ctx, scheme, vec, group, e2m1_exp) ? 9 : 0;
}

void add_moe_scaled_x(BuildOptions& options, const Context& ctx, const QuantScheme& scheme, int vec, int group,
                      int e2m1_exp) {
  if (moe_scaled_x_enabled(ctx, scheme, vec, group, e2m1_exp)) options.define("MOE_SCALED_X");
}

MoeNumerics moe_numerics(const Context& ctx, bool exact_division_needed, bool subnormal_decode_needed) {
  MoeNumerics n;
  const DeviceInfo& info = ctx.info();
  // Without exact division only W4A4 NVFP4 fails (add_exact_division throws, naming the device).
  if (exact_division_needed || has_exact_division(info)) add_exact_division(n.options, info, "the MoE kernels");
  const std::string choice = env_switch("FP4CL_MOE_E2M1_DECODE", {"exact", "subnormal"}, "'exact' or 'subnormal'");
  const bool denormals = ctx.info().fp32_denormals;
  if (choice == "subnormal" && !denormals)
    fail("FP4CL_MOE_E2M1_DECODE = subnormal, but {} flushes fp32 denormals", info.name);
  // Both decodes give the same values, hence the same bits: only the speed differs.
  const bool slow = choice.empty() && !subnormal_decode_needed && cpu_fp32_denormals_slow(ctx.info());
  if (choice == "exact" || !denormals || slow) {
    n.options.define("MOE_E2M1_NO_DENORM");
    n.e2m1_exp = 0;
    log::info("MoE: E2M1 codes decoded to exact values ({})",
              !denormals ? "the device flushes fp32 denormals"
              : slow     ? fmt::format("multiplies with fp32 denormals are {:.0f}x slower than with normal numbers "
                                       "on this processor; FP4CL_MOE_E2M1_DECODE=subnormal decodes to them anyway",
                                       host_denormal_speed().ratio())
                         : std::string("FP4CL_MOE_E2M1_DECODE=exact"));
  }
  return n;
}

}  // namespace fp4cl
