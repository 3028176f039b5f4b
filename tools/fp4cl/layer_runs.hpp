// Running a checkpoint's layers on host data and checking them against the scalar references,
// for `fp4cl run` and `fp4cl demo`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl::cli {

// A layer's output [rows, cols] as the device wrote it: BF16 bits or fp32 values.
struct LayerOutput {
  bool bf16 = true;
  std::vector<std::uint16_t> bf16_bits;
  std::vector<float> f32;
  std::size_t size() const { return bf16 ? bf16_bits.size() : f32.size(); }
  double value(std::size_t i) const;
};

// An MoE layer's routing: router logits [T, E] or precomputed ids and weights [T, k].
struct MoeRoutingInput {
  bool from_logits = true;
  std::vector<float> router_logits;
  std::vector<std::int32_t> topk_ids;
  std::vector<float> topk_weights;
};

LayerOutput run_linear(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t tokens);

struct MoeRun {
  LayerOutput output;
  MoeStats stats;
  MoeCall call;
};
MoeRun run_moe(const Context& ctx, MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
               const MoeRoutingInput& routing, std::int64_t tokens);

// How a device output compares with the scalar reference's rigorous bound.
struct CheckResult {
  std::size_t checked = 0;
  std::size_t outside = 0;   // outputs beyond the bound
  double worst_ratio = 0.0;  // max |device - reference| / allowed error (> 1: out of bounds)
  std::string worst;         // where the worst ratio is, with values
  // Router logits whose routing rests on keys closer than fp32 resolves (reference::MoeRouting::
  // ambiguous): a device may route otherwise, so outputs out of bounds are not conclusive.
  bool ambiguous_routing = false;
  bool ok() const { return outside == 0; }
};
// "320 outputs within bounds, worst |error|/bound 0.42" or "... 3 of 320 outputs OUT OF BOUNDS ...".
std::string describe(const CheckResult& r);
// "SwiGLU" or "gpt-oss's clamped SwiGLU (alpha 1.702, limit 7)".
std::string describe(const MoeActivation& a);
// "softmax" or "sigmoid, 8 groups (4 kept), correction bias, × 2.5" (or why fp4cl does not compute it).
std::string describe(const MoeLogitRouting& r);

// `bias`: the layer's LinearOptions::bias (empty: none).
CheckResult check_linear(const QuantScheme& scheme, const Fp4Weight& weight, const std::vector<std::uint16_t>& x,
                         std::int64_t tokens, const LayerOutput& y, const std::vector<float>& bias = {});
CheckResult check_moe(const Fp4Experts& experts, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                      const MoeRoutingInput& routing, std::int64_t tokens, const LayerOutput& y);

}  // namespace fp4cl::cli
