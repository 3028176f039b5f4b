// The activation pre-pass of the FP4 "rows" kernels (kernels/linear_activations.cl): BF16 x [m, k]
// to split fp32 rows in the layer's workspace, quantized with the FP4 recipe under W4A4.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

class LinearActivationPass {
 public:
  // Builds the pass for activations of k elements padded to kpad. `input_gs_q` is the
  // quant-direction global scale of NVFP4 W4A4 activations (unused otherwise).
  void prepare(const Context& ctx, const QuantScheme& scheme, std::int64_t k, std::int64_t kpad, float input_gs_q);

  // Workspace bytes for `tokens` split rows.
  std::size_t workspace_bytes(std::int64_t tokens) const;

  // Enqueues the pass for m ≥ 1 tokens after `wait` (may be null) and returns its event.
  cl::Event enqueue(const Context& ctx, const cl::Buffer& x, const cl::Buffer& workspace, std::int64_t m,
                    const std::vector<cl::Event>* wait);

 private:
  cl::Kernel kernel_;
  std::int64_t k_ = 0, kpad_ = 0;
  std::size_t local_ = 1;
};

}  // namespace fp4cl
