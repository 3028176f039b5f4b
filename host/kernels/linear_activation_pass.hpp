// The activation pre-pass of the FP4 linear kernels (kernels/linear_activations.cl): BF16 x [m, k]
// to split fp32 rows in the layer's workspace, quantized with the FP4 recipe under W4A4; or, for
// the integer GEMV, W4A4 activations as integer codes and block scales (W4A16: as integers on a
// grid per 16-element chunk, in two planes); or, for BF16 dot products, W4A4 activations as BF16
// rows.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

// What the pass writes.
enum class ActivationForm {
  split_float,  // fp32 rows, even elements then odd ones (W4A16: BF16 values; W4A4: e2m1 × scale)
  int_codes,    // W4A4 only: int8 2·e2m1 rows, -12 × their sum per 16-element chunk, then fp32 chunk scales
  bf16_rows,    // W4A4 only: BF16 rows [m, k] of e2m1 × scale (exact), element order
  block_scaled, // fp32 rows (W4A4: e2m1 × scale), each 16-element chunk scaled by 2^(126 - E), then 2^E per chunk
  int_planes,   // W4A16 only: each 16-element chunk as 15-bit integers on a grid 2^(E - 14), in two int8 planes
};

class LinearActivationPass {
 public:
  // Builds the pass for activations of k elements padded to kpad, for up to max_tokens tokens.
  // `input_gs_q` is the quant-direction global scale of NVFP4 W4A4 activations (unused otherwise).
  void prepare(const Context& ctx, const QuantScheme& scheme, std::int64_t k, std::int64_t kpad, float input_gs_q,
               std::int64_t max_tokens, ActivationForm form = ActivationForm::split_float);

  // Workspace bytes for max_tokens tokens.
  std::size_t workspace_bytes() const;
  // int_codes: where the chunks' offsets (-12 × the sum of their codes) start in the workspace
  // (bytes; the codes start at 0).
  std::size_t chunk_offsets_offset() const;
  // int_codes: where the block scales start in the workspace (bytes).
  std::size_t scales_offset() const;
  // block_scaled: where the chunks' factors 2^E start in the workspace (bytes; the rows start at 0).
  std::size_t factors_offset() const;

  // Enqueues the pass for m ≥ 1 tokens after `wait` (may be null) and returns its event.
  cl::Event enqueue(const Context& ctx, const cl::Buffer& x, const cl::Buffer& workspace, std::int64_t m,
                    const std::vector<cl::Event>* wait);

 private:
  cl::Kernel kernel_;
  ActivationForm form_ = ActivationForm::split_float;
  std::int64_t k_ = 0, kpad_ = 0, max_tokens_ = 0;
  std::size_t local_ = 1;
  std::int64_t item_elements_ = 64;  // elements a work-item: a step, or an FP4 block
};

}  // namespace fp4cl
