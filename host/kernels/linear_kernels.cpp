// The FP4 linear kernel strategies, in priority order.
#include <fmt/format.h>

#include "kernels/linear_kernel.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "support/check.hpp"
#include "tuning/tuning_defaults.hpp"

namespace fp4cl {

std::string LinearConfig::describe() const {
  return fmt::format("{} linear {}x{} (n x k), up to {} tokens, {} out{}", scheme.name(), n, k, max_tokens,
                     to_string(output), has_bias ? ", bias" : "");
}

const char* to_string(LinearRegime r) { return r == LinearRegime::decode ? "decode" : "prefill"; }

long long linear_tuning_value(const LinearConfig& config, const std::string& strategy, const std::string& name) {
  if (const auto it = config.tuning.find(name); it != config.tuning.end()) return it->second;
  const tuning::Params defaults = tuning::linear_default_params(config.device, strategy);
  if (const auto it = defaults.find(name); it != defaults.end()) return it->second;
  fail("linear kernel '{}' has no tuning parameter '{}'", strategy, name);
}

const LinearKernelRegistry& linear_kernels() {
  static const LinearKernelRegistry registry = [] {
    LinearKernelRegistry r("linear", "FP4CL_LINEAR_KERNEL");
    r.add("mma", make_linear_mma_kernel);         // tensor cores (NVIDIA, sm_80+), decode and prefill
    r.add("gemm_tiled", make_gemm_tiled_kernel);  // prefill (refuses decode by design)
    r.add("gemv_words", make_gemv_words_kernel);  // decode on CPUs: 16 rows per work-item, permute decode
    r.add("gemv_int", make_gemv_int_kernel);      // W4A4 decode on CPUs: integer block sums
    r.add("gemv_denorm", make_gemv_denorm_kernel);  // W4A16 decode on CPUs: shift decode, scaled activations
    r.add("gemv_lanes", make_gemv_lanes_kernel);  // decode on CPUs: 8 rows per work-item as lanes
    r.add("gemv_split", make_gemv_split_kernel);  // decode on GPUs: rows split over lanes, coalesced loads
    r.add("gemv_rows", make_gemv_rows_kernel);    // decode elsewhere, and any call nothing else serves
    return r;
  }();
  return registry;
}

}  // namespace fp4cl
