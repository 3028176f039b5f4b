// Quantization of BF16 rows to NVFP4 / MXFP4 and dequantization back, on the OpenCL device
// (kernels/quantize.cl). Results are bit-identical to the host reference (fp4cl/formats.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

enum class DequantizedType { bf16, f32 };
const char* to_string(DequantizedType type);

// How the kernels spread work: each work-item handles `blocks_per_item` consecutive blocks of
// one row, in work-groups of local_size (chunks of blocks, rows). 0 = the device kind's default.
struct QuantizerOptions {
  std::array<std::size_t, 2> local_size{0, 0};
  std::size_t blocks_per_item = 0;
};
QuantizerOptions default_quantizer_options(const DeviceInfo& info);

// Builds the kernels once (a program-cache hit after the first Quantizer on a context) and
// enqueues them on ctx.queue(). Each call checks its arguments and throws fp4cl::Error naming
// the argument and what was expected (buffers: not null, made in the context's OpenCL context,
// large enough); it returns the event of its launch (for waiting on, or profiling when the queue
// was created with profiling) and waits for `wait_for` first.
// A Quantizer sets kernel arguments on each call: use one per thread.
class Quantizer {
 public:
  explicit Quantizer(const Context& ctx, QuantizerOptions options = {});
  ~Quantizer();
  Quantizer(Quantizer&&) noexcept;
  Quantizer& operator=(Quantizer&&) noexcept;

  // BF16 `input` [rows, cols] (ushort storage) → `packed` [rows, cols/2] and `scales` in
  // shape.scale_layout. gs_quant: NVFP4's quant-direction global scale (finite, > 0); must be 1
  // for MXFP4. Swizzled scales are written whole, padding zeroed by the kernel.
  cl::Event quantize(const Fp4MatrixShape& shape, const cl::Buffer& input, float gs_quant, const cl::Buffer& packed,
                     const cl::Buffer& scales, const std::vector<cl::Event>& wait_for = {});

  // `packed` and `scales` (as quantize writes them) → `output` [rows, cols] in `type`:
  // w = e2m1 × scale × gs_dequant (NVFP4's dequant-direction global scale; must be 1 for MXFP4).
  cl::Event dequantize(const Fp4MatrixShape& shape, const cl::Buffer& packed, const cl::Buffer& scales,
                       float gs_dequant, DequantizedType type, const cl::Buffer& output,
                       const std::vector<cl::Event>& wait_for = {});

  const QuantizerOptions& options() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fp4cl
