// FP4 weights on the host, as a loader hands them to a layer: packed E2M1 codes and block scales
// in the checkpoint's linear (unswizzled) layout, with global scales already in the dequant
// direction. A layer's kernel prepares its own device layout (swizzled scales, repacking) from
// these once, at creation. See ../shared/spec/FP4.md §2–§4 and §6.
//
// Activation global scales (NVFP4 W4A4) come in both directions: the quant direction gs_q that
// the activation quantization recipe multiplies by (FP4.md §3), and the dequant direction gs_d
// that the epilogue uses, alpha = gs_d(input) × gs_d(weight). A checkpoint stores one of them
// (ModelOpt input_scale: gs_d; compressed-tensors input_global_scale: gs_q); that one is kept
// bit-exact and the other is its IEEE fp32 reciprocal. So for ModelOpt input_scale is exactly the
// stored value (1/(1/input_scale) may differ from it by an ulp), and alpha = input_scale ×
// global_scale is what vLLM computes. W4A16 and MXFP4 layers leave both at 1 (Fp4Experts: E ones).
// The layers use each one for what it is: input_global_scale quantizes the activations,
// input_scale (an fp32 product with the weight's global scale) scales the output. Both must be
// set, as reciprocals up to rounding (the layers refuse a pair that is not): code that builds
// weights by hand sets them together with set_input_scales_from_quant().
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fp4cl/scheme.hpp"

namespace fp4cl {

// One linear layer's weight W [n, k] (y = x · Wᵀ).
struct Fp4Weight {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t n = 0;                 // out_features
  std::int64_t k = 0;                 // in_features, a multiple of the block size
  std::vector<std::uint8_t> packed;   // [n, k/2]: element 2i in the low nibble, 2i+1 in the high
  std::vector<std::uint8_t> scales;   // [n, k/block]: E4M3 (NVFP4) or E8M0 (MXFP4) bytes
  float global_scale = 1.0f;          // gs_d, dequant direction (NVFP4); 1 for MXFP4
  float input_global_scale = 1.0f;    // activations' gs_q, quant direction (NVFP4 W4A4 only)
  float input_scale = 1.0f;           // activations' gs_d, dequant direction (NVFP4 W4A4 only)

  // Sets both activation global scales from the quant-direction gs_q, as the loader does for a
  // checkpoint that stores gs_q: input_global_scale = gs_q, input_scale = its fp32 reciprocal.
  void set_input_scales_from_quant(float gs_q) {
    input_global_scale = gs_q;
    input_scale = 1.0f / gs_q;
  }
};

// The routed experts of one MoE layer, stacked (vLLM's layout, FP4.md §6):
// w13 [E, 2I, H/2] in [gate; up] row order, w2 [E, H, I/2]; block scales alike.
struct Fp4Experts {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t num_experts = 0;        // E
  std::int64_t hidden = 0;             // H
  std::int64_t intermediate = 0;       // I
  std::vector<std::uint8_t> w13_packed, w13_scales;  // [E, 2I, H/2], [E, 2I, H/block]
  std::vector<std::uint8_t> w2_packed, w2_scales;    // [E, H, I/2],  [E, H, I/block]
  // Dequant-direction global scales (NVFP4; all 1 for MXFP4). Gate and up may differ:
  std::vector<float> w13_global_scale;  // [E, 2]: {gate, up} per expert
  std::vector<float> w2_global_scale;   // [E]
  // Quant-direction activation global scales for W4A4 (NVFP4), per expert:
  std::vector<float> w13_input_global_scale;  // [E] FC1 input
  std::vector<float> w2_input_global_scale;   // [E] FC2 input (used only when asked; b12x uses 1.0)
  // The same in the dequant direction (gs_d, for the epilogue's alpha), per expert:
  std::vector<float> w13_input_scale;  // [E] FC1 input
  std::vector<float> w2_input_scale;   // [E] FC2 input
  // Optional biases (gpt-oss), fp32, finite; empty: none. Both or neither. Added to the sums after
  // their dequant factors: gate / up = factor × dot + bias, FC2's output = factor × dot + bias.
  std::vector<float> w13_bias;  // [E, 2I]: the gate rows' biases, then the up rows' (w13's row order)
  std::vector<float> w2_bias;   // [E, H]

  // Sets all four from the quant-direction scales per expert ([E] each), as the loader does for
  // a checkpoint that stores gs_q: the *_input_global_scale are `fc1` and `fc2`, the
  // *_input_scale their fp32 reciprocals.
  void set_input_scales_from_quant(std::vector<float> fc1, std::vector<float> fc2) {
    w13_input_scale.clear();
    w2_input_scale.clear();
    for (float gs_q : fc1) w13_input_scale.push_back(1.0f / gs_q);
    for (float gs_q : fc2) w2_input_scale.push_back(1.0f / gs_q);
    w13_input_global_scale = std::move(fc1);
    w2_input_global_scale = std::move(fc2);
  }
};

}  // namespace fp4cl
