// Checks of a layer's device output against the scalar reference (host/reference/), run before
// a kernel is timed: a fast kernel that computes the wrong thing must not get a number.
//   - linear: a sample of outputs (first and last token and row, and random ones) within the
//     error bound of tests/linear (fp32 accumulation of k+2 terms, plus half a BF16 ulp);
//   - MoE: every output of a few tokens (the first and the last) within the reference's
//     rigorous bound (moe_reference.hpp).
// Each returns a short summary ("ok: 256 outputs, worst 0.41 of bound") and throws fp4cl::Error
// naming the first output out of bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/weights.hpp"
#include "reference/moe_reference.hpp"
#include "synthetic_data.hpp"

namespace fp4cl::bench {

// y: the layer's output for x [m, k] as floats (BF16 outputs widened).
std::string check_linear_output(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                std::int64_t m, const std::vector<float>& y, bool bf16_output, int samples);

// The reference values and bounds of the tokens the MoE check reads (the first and the last of
// a call), computed once for a layer's inputs so that many candidate kernels (the tuner's) can
// be checked against them.
struct MoeCheckReference {
  std::int64_t hidden = 0;
  std::vector<std::int64_t> picked;  // the tokens checked
  reference::MoeReferenceResult ref;
};
MoeCheckReference moe_check_reference(const Fp4Experts& experts, const MoeConfig& config,
                                      const std::vector<std::uint16_t>& x, const Routing& routing,
                                      std::int64_t tokens);
// The same for a reference routing of all `tokens` tokens (router logits: its weights' error kept).
MoeCheckReference moe_check_reference(const Fp4Experts& experts, const MoeConfig& config,
                                      const std::vector<std::uint16_t>& x, const reference::MoeRouting& routing,
                                      std::int64_t tokens);
std::string check_moe_output(const MoeCheckReference& check, const std::vector<std::uint16_t>& out_bf16,
                             const std::vector<float>& out_fp32);

// out: the layer's output [T, H], BF16 bits (`out_bf16`) or fp32 (`out_fp32`, when the other is empty).
std::string check_moe_output(const Fp4Experts& experts, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                             const Routing& routing, std::int64_t tokens, const std::vector<std::uint16_t>& out_bf16,
                             const std::vector<float>& out_fp32);

}  // namespace fp4cl::bench
