// The scalar reference MoE (no OpenCL): FP4 weights dequantized exactly, fp64 arithmetic, the
// layer's rounding points (BF16 SwiGLU output; W4A4 activation quantization with the shared
// recipe, kernels/common/quant_recipe.cl compiled as C++) — see include/fp4cl/moe.hpp.
//
// Besides the value it returns, for every output element, a rigorous bound on how far any
// conforming fp32 implementation may land from it. The device computes the same function with
// fp32 arithmetic in an order of its choosing; the bound accounts for exactly that:
//   - a dot product of n terms evaluated in any order (with or without FMA), then multiplied by
//     its fp32 scale factor: |error| <= γ(n+4) · Σ|terms| · |factor|, γ(m) = m·u/(1 - m·u),
//     u = 2^-24. When the reference proves the sum exact — every term is an fp32 number that is
//     a multiple of 2^q and Σ|terms| < 2^(24+q), so every partial sum in every order is exact —
//     only the final product's rounding remains (γ(1)·|value|, or 0 when it is exact). The factor
//     is the layer's fp32 number: the dequant-direction global scale, times (W4A4 NVFP4) the
//     stored dequant-direction input scale as one fp32 product, alpha = input_scale × global_scale;
//   - silu(g) = g / (1 + exp(-g)) in fp32: 16 u relative (exp 4 ulp, division 2.5 ulp, the
//     addition) plus 1.1 × the error of g (|silu'| <= 1.1); the product with `up`: 1 rounding;
//     the clamped SwiGLU (gpt-oss): the clamps move no error, g / (1 + exp(-alpha·g)) takes
//     (16 + 2·|alpha·g|) u relative (the product alpha·g rounded too) and its slope times the
//     error of g, up + 1 one rounding; biases one rounding each (gate, up, FC2's output);
//   - the BF16 rounding of the SwiGLU output: where the uncertainty interval of `a` contains a
//     BF16 rounding boundary the device may land on either side. W4A16 carries that difference
//     into FC2; W4A4 re-quantizes every possible variant of the block (up to 4096 variants,
//     beyond that a coarse bound: the whole FP4 quantization error) and carries the largest
//     difference of each dequantized element;
//   - routing weights from logits: fp32 softmax / renormalization, a relative error bound
//     (MoeRouting::weight_rel_error); precomputed weights are exact;
//   - the top-k sum: k products and k additions, γ(2k+2) relative to Σ|terms|;
//   - W4A16 (NVFP4 and MXFP4) on CPUs may multiply the activations on an integer grid per chunk
//     (README, Numerics; chunks of 16 for FC1's inputs, 8 for FC2's): FC1's sums may move by
//     Σ |w| · |grid(x) - x|, and each FC2 input that some BF16 rounding of its SwiGLU output could
//     leave off the grid by half a grid step.
// Tests choose data that keeps FC1 exact (BF16 inputs on a coarse grid, block scales of few
// bits, power-of-two global scales); the bound then stays within a few BF16 ulps, and it remains
// rigorous for any data.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/moe_activation.hpp"
#include "fp4cl/moe_logit_routing.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl::reference {

// Routing of T tokens to k experts each, in fp64.
struct MoeRouting {
  std::int64_t tokens = 0;
  int top_k = 0;
  std::vector<std::int32_t> ids;  // [T, k] global expert ids
  std::vector<double> weights;    // [T, k]
  // |device weight - weight| <= weight_rel_error × |weight| + weight_abs_error (the absolute part:
  // fp32 scores that underflow).
  double weight_rel_error = 0.0;
  double weight_abs_error = 0.0;
  // Logit routing other than plain softmax: true where some choice (the kept groups, or an
  // expert's slot among the top k + 1) rests on keys closer than the device's fp32 keys may be
  // off, so that a conforming device may choose otherwise. Tests assert that their data is not.
  bool ambiguous = false;
};

// Precomputed ids and fp32 weights (the device uses the weights as given: no error).
MoeRouting routing_from_topk(const std::vector<std::int32_t>& ids, const std::vector<float>& weights,
                             std::int64_t tokens, int top_k);

// Softmax over each row of `logits` [T, num_experts], top-k by logit value (ties to the lower
// index; NaN ranks below every number), optional renormalization: the layer's device routing.
MoeRouting routing_from_logits(const std::vector<float>& logits, std::int64_t tokens, std::int64_t num_experts,
                               int top_k, bool renormalize);

// The same for any MoeLogitRouting (fp4cl/moe_logit_routing.hpp: scores, groups, correction
// bias, scaling), in fp64; plain softmax gives routing_from_logits' result. Throws
// fp4cl::Error where the routing does not fit (check_moe_logit_routing).
MoeRouting routing_from_logits(const std::vector<float>& logits, std::int64_t tokens, std::int64_t num_experts,
                               int top_k, bool renormalize, const MoeLogitRouting& routing);

// `r` with each token's shared slots after its routed ones (MoeConfig::shared_experts): experts
// first .. first + shared - 1 (the last `shared` of the stack), weight 1 (exact).
MoeRouting with_shared_experts(const MoeRouting& r, std::int32_t first, int shared);

struct MoeReferenceOptions {
  QuantScheme scheme;
  bool calibrated_fc2_input_scale = false;  // NVFP4 W4A4: quantize the FC2 input with w2_input_global_scale
  std::vector<std::int32_t> expert_map;     // empty = identity
  MoeActivation activation;                 // MoeConfig::activation
};

struct MoeReferenceResult {
  std::int64_t tokens = 0, hidden = 0;
  std::vector<double> value;  // [T, H] the output before its final rounding
  std::vector<double> bound;  // [T, H] |fp32 output of a conforming device - value| <= bound
  // Diagnostics of the bound model.
  std::int64_t fc1_rows = 0, fc1_rows_exact = 0;       // FC1 sums proven exact in fp32
  std::int64_t swiglu_values = 0, swiglu_ambiguous = 0;  // BF16 roundings that may go either way
  std::int64_t fc2_blocks_coarse = 0;                  // W4A4 blocks bounded coarsely
};

// Throws fp4cl::Error for an id outside [0, E_global) or an invalid expert map, like the layer.
MoeReferenceResult moe_reference(const Fp4Experts& experts, const MoeReferenceOptions& options,
                                 const std::vector<std::uint16_t>& x_bf16, const MoeRouting& routing);

// Whether a device output element is consistent with the reference: the BF16 output must lie
// between the BF16 roundings of value - bound and value + bound; the fp32 output within bound.
bool accepts_bf16(const MoeReferenceResult& ref, std::size_t index, std::uint16_t bits);
bool accepts_fp32(const MoeReferenceResult& ref, std::size_t index, float value);

// Round-to-nearest-even of a double to BF16 (one rounding, no detour through float).
double round_to_bf16(double v);

}  // namespace fp4cl::reference
