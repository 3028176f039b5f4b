// The scalar reference of an FP4 linear layer, y = x · Wᵀ (+ bias), in double precision. It
// depends on no OpenCL: the codecs and the activation recipe are the shared host/device code
// (kernels/common/formats.cl, quant_recipe.cl) compiled as C++, so that W4A4 activations are
// quantized bit for bit as the device does. Tests, `fp4cl-bench --check` and tuners compare with it.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl::reference {

// Dequantized weight element W[n][k] = e2m1 × block scale × gs_d (exact in double).
double weight_value(const Fp4Weight& w, std::int64_t n, std::int64_t k);

// BF16 activations [m, k] quantized with the contract recipe (FP4.md §3 NVFP4 with the
// quant-direction global scale `gs`; §4 MXFP4, `gs` unused): codes packed like weights and
// block-scale bytes, row-major [m, k/block].
struct QuantizedActivations {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t m = 0, k = 0;
  std::vector<std::uint8_t> packed;  // [m, k/2]
  std::vector<std::uint8_t> scales;  // [m, k/block]
  // e2m1(code) × block scale of element (i, j): the activation without its global scale.
  double value(std::int64_t i, std::int64_t j) const;
};
QuantizedActivations quantize_activations(WeightFormat format, const std::uint16_t* x_bf16, std::int64_t m,
                                          std::int64_t k, float gs);

// W4A16 activations as the integer GEMV (gemv_int, CPUs) multiplies them (README, Numerics): each
// 16-element chunk on the grid 2^(E - 14), 2^E the smallest power of two above its largest
// magnitude (at least 2^-125, the bound of a chunk of BF16 denormals), rounded to nearest (ties to
// even); exact for elements within 2^7 of their chunk's largest. The results are BF16 numbers; a
// chunk holding NaN or an infinity is left as it is. `count` is a multiple of 16 (rows of k).
std::vector<std::uint16_t> w4a16_int_grid(const std::uint16_t* x_bf16, std::int64_t count);
// The same for values given as doubles (BF16 numbers) in chunks of `chunk` elements (the MoE
// layer's integer planes: 16 for FC1's inputs, 8 for FC2's), into out[0 .. count - 1].
void w4a16_int_grid_values(const double* x, std::int64_t count, int chunk, double* out);

// One output of the layer before it is rounded, and the magnitude it was summed from.
struct LinearOutput {
  double y = 0.0;            // alpha · Σ_k a·w + bias
  double abs_terms = 0.0;    // |alpha| · Σ_k |a·w|
  double grid_slack = 0.0;   // W4A16: |alpha| · Σ_k |w| · |grid(a) - a| (w4a16_int_grid), else 0
};

// The largest |output - o.y| of a conforming fp32 implementation of the layer: the products a·w
// are exact in fp32 (a decoded weight has at most 6 significant bits, an activation 8), so the
// only fp32 roundings are the k - 1 additions (in any order), the epilogue's multiply by the fp32
// alpha and the bias addition: γ(k+2)·(Σ|terms| + |bias|), γ(n) = n·u/(1 - n·u), u = 2^-24,
// plus 2^-149 per rounding for results below the normal range. Under W4A16 an implementation may
// multiply the activations on their integer grid instead (gemv_int): that adds at most
// o.grid_slack (and its terms' magnitude grows by at most as much). A BF16 output adds its own
// rounding to nearest: half a BF16 ulp of the fp32 value.
double output_bound(const LinearOutput& o, std::int64_t k, double bias_magnitude, bool bf16_output);

// The layer's exact outputs, all of them or any sample (large shapes: tests check a sample).
//   W4A16: a = the BF16 activations; alpha = gs_d(weight).
//   W4A4:  a = the recipe's quantized activations (QuantizedActivations::value) with the
//          quant-direction input_global_scale; alpha = gs_d(input) · gs_d(weight) =
//          input_scale × global_scale rounded to fp32 once (vLLM's alpha; the layer's factor).
// `x_bf16` holds m·k values; `bias` is empty or holds n values. The weight must outlive this.
class LinearReference {
 public:
  LinearReference(const QuantScheme& scheme, const Fp4Weight& w, const std::uint16_t* x_bf16, std::int64_t m,
                  std::vector<float> bias = {});

  double alpha() const { return alpha_; }
  LinearOutput at(std::int64_t token, std::int64_t row) const;
  // Every output, [m, n] row-major.
  std::vector<LinearOutput> all() const;

 private:
  // Row `row` of W without its global scale: e2m1 × block scale, exact.
  void decode_row(std::int64_t row, std::vector<double>& out) const;
  LinearOutput dot(const std::vector<double>& w_row, std::int64_t token, std::int64_t row) const;

  const Fp4Weight& w_;
  std::int64_t m_;
  std::vector<double> a_;  // [m, k]
  std::vector<double> grid_error_;  // W4A16: |w4a16_int_grid(x) - x| per element [m, k]; else empty
  std::vector<float> bias_;
  double alpha_ = 1.0;
};

}  // namespace fp4cl::reference
