// Quantizing one checkpoint weight W [rows, cols] (y = x·Wᵀ) to NVFP4 or MXFP4 the way the
// checkpoint producers do it (FP4.md §3–§5):
//
//  - NVFP4: a per-tensor global scale from the tensor's amax, gs_q = 448·6/amax in fp32 (what
//    compressed-tensors' generate_gparam stores; ModelOpt stores the dequant direction,
//    weight_scale_2 = amax/(448·6)). Per 16-block: scale byte e4m3(gs_q·amax_b/6), elements
//    e2m1(x·mult) with mult = 1/(sf·(1/gs_q)) — FP4.md §3's recipe, the code the kernels compile,
//    so a BF16 weight gives exactly fp4cl::quantize_nvfp4's bytes. The result's global_scale is
//    fp32(1/gs_q): the dequant-direction scale that exactly inverts the multiplier used.
//  - MXFP4: compressed-tensors' weight rule (quantization/utils/mxfp4_utils.py,
//    generate_mxfp4_scales, which calculate_qparams applies to 4-bit float group-32 args): the block
//    amax is rounded to a power of two by adding half an FP4 mantissa step to its bits and
//    dropping the mantissa (so a significand ≥ 1.75 goes up to the next power), then
//    E = 127 + log2(that power) - 2, clamped at 0. This is the OCP rule floor(log2 amax) - 2 except
//    for significands in [1.75, 2), where OCP would clip up to 8/6 of the top element; with it the
//    largest scaled element stays below 7 (clipping error < 1, half the 4→6 step). It differs from
//    the "ceil" rule fp4cl uses for activations (FP4.md §4); a checkpoint stores E, so readers need
//    no rule. An all-zero block gets E = 0 (compressed-tensors: log2(0) = -inf, clamped to 0).
//    Elements: e2m1(x·2^(127-E)), RNE and saturating (FP4.md §1).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fp4cl/formats.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl::detail {

// A weight tensor's values as floats (exact for BF16 and F32). Throws fp4cl::Error naming the
// tensor for another dtype, a shape that is not 2-D, or an Inf/NaN element.
std::vector<float> weight_values(const TensorView& weight);

// max |x| over all values.
float tensor_amax(const std::vector<float>& values);

// The NVFP4 global scale in the quant direction, fp32(448·6/amax); 1 for an all-zero tensor (any
// value quantizes it to zeros). Throws naming `tensor` when amax is so small that it overflows.
float nvfp4_global_scale(float amax, std::string_view tensor);

// compressed-tensors' MXFP4 weight scale byte for a block with maximum magnitude `amax`.
std::uint8_t mxfp4_weight_scale_byte(float amax);

// Quantizes `values` [rows, cols] row-major. `gs_quant` is the NVFP4 quant-direction global scale
// (ignored for MXFP4). Throws fp4cl::Error naming `tensor` when cols is not a multiple of the
// block size.
QuantizedRows quantize_weight(WeightFormat format, const std::vector<float>& values, std::int64_t rows,
                              std::int64_t cols, float gs_quant, std::string_view tensor);

}  // namespace fp4cl::detail
