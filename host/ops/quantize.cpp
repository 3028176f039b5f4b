// Host launcher of kernels/quantize.cl: argument checks, kernel selection, NDRange, events.
#include "cl/caller_buffers.hpp"
#include "cl/opencl_calls.hpp"
#include "fp4cl/quantize.hpp"

#include <limits>
#include <string>

#include "cl/exact_division.hpp"
#include "formats/argument_checks.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

constexpr const char* kKernelFile = "quantize.cl";

int index_of(WeightFormat f) { return f == WeightFormat::nvfp4 ? 0 : 1; }
int index_of(ScaleLayout l) { return l == ScaleLayout::linear ? 0 : 1; }
int index_of(DequantizedType t) { return t == DequantizedType::bf16 ? 0 : 1; }
const char* kernel_name_part(WeightFormat f) { return f == WeightFormat::nvfp4 ? "nvfp4" : "mxfp4"; }

std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

// Work-items along a row of `blocks` blocks, each taking `per_item` of them.
std::int64_t items_along(std::int64_t blocks, std::size_t per_item) {
  return static_cast<std::int64_t>(round_up(static_cast<std::size_t>(blocks), per_item) / per_item);
}

void check_buffer(const Context& ctx, const cl::Buffer& buffer, std::int64_t needed, const char* call, const char* name,
                  const Fp4MatrixShape& s) {
  const std::int64_t have = caller_buffer_bytes(ctx, buffer, call, name);
  if (have < needed)
    fail("{}: the {} buffer has {} bytes; {} [rows {}, cols {}] with {} scales needs {}", call, name, have,
         to_string(s.format), s.rows, s.cols, to_string(s.scale_layout), needed);
}

void check_distinct(const cl::Buffer& a, const char* a_name, const cl::Buffer& b, const char* b_name,
                    const char* call) {
  if (a() == b()) fail("{}: the {} and {} buffers are the same buffer", call, a_name, b_name);
}

void check_shape(const Fp4MatrixShape& s, const char* call) {
  check_fp4_shape(call, s.format, s.rows, s.cols);
  // The kernels index rows and columns with 32 bits, the swizzled padding included.
  constexpr std::int64_t max32 = std::numeric_limits<std::uint32_t>::max();
  if (s.cols > max32 || swizzled_padded_rows(s.rows) > max32)
    fail("{}: rows = {}, cols = {} exceed the kernels' 32-bit indices", call, s.rows, s.cols);
  if (s.scale_layout == ScaleLayout::swizzled &&
      swizzled_padded_rows(s.rows) * swizzled_padded_cols(s.scale_cols()) > max32)
    fail("{}: {} × {} swizzled scales exceed the 32-bit offsets of the swizzled layout", call, s.rows,
         s.scale_cols());
}

}  // namespace

const char* to_string(DequantizedType type) { return type == DequantizedType::bf16 ? "BF16" : "FP32"; }

QuantizerOptions default_quantizer_options(const DeviceInfo& info) {
  // PoCL (measured with `fp4cl demo`, 4096 × 4096): each work-item walking 64 blocks (2–4 KiB of
  // contiguous input) of its row; the work-group size made no measurable difference. GPUs (not
  // yet measured): one group of 8 blocks per work-item and many work-items per group.
  if (info.kind == DeviceKind::cpu) return {{1, 1}, 64};
  return {{64, 2}, 8};
}

struct Quantizer::State {
  explicit State(const Context& c) : ctx(c) {}
  Context ctx;
  QuantizerOptions options;
  cl::Kernel quantize[2][2];       // [format][layout]
  cl::Kernel dequantize[2][2][2];  // [format][layout][type]
};

Quantizer::Quantizer(const Context& ctx, QuantizerOptions options) : state_(std::make_unique<State>(ctx)) {
  State& s = *state_;
  const QuantizerOptions defaults = default_quantizer_options(ctx.info());
  s.options = options;
  if (s.options.local_size[0] == 0 && s.options.local_size[1] == 0) s.options.local_size = defaults.local_size;
  if (s.options.blocks_per_item == 0) s.options.blocks_per_item = defaults.blocks_per_item;
  const auto& local = s.options.local_size;
  if (local[0] == 0 || local[1] == 0 || local[0] * local[1] > ctx.info().max_work_group_size)
    fail("Quantizer: local size {} × {} is not a valid work-group size on {} (at most {} work-items)", local[0],
         local[1], ctx.info().name, ctx.info().max_work_group_size);
  if (s.options.blocks_per_item % 8 != 0 || s.options.blocks_per_item > (1u << 24))
    fail("Quantizer: blocks_per_item = {} is not a multiple of 8 up to 2^24 (the kernels quantize 8 blocks at a time)",
         s.options.blocks_per_item);
  BuildOptions build;
  add_exact_division(build, ctx.info(), kKernelFile);
  const cl::Program program = ctx.programs().program(kKernelFile, build);
  auto make = [&](const std::string& name) {
    cl_int err = CL_SUCCESS;
    cl::Kernel k(program, name.c_str(), &err);
    check_cl(err, "creating kernel {} from {}", name, kKernelFile);
    return k;
  };
  for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    for (ScaleLayout l : {ScaleLayout::linear, ScaleLayout::swizzled}) {
      const std::string suffix = std::string(kernel_name_part(f)) + "_" + to_string(l);
      s.quantize[index_of(f)][index_of(l)] = make("quantize_" + suffix);
      s.dequantize[index_of(f)][index_of(l)][index_of(DequantizedType::bf16)] = make("dequantize_" + suffix + "_bf16");
      s.dequantize[index_of(f)][index_of(l)][index_of(DequantizedType::f32)] = make("dequantize_" + suffix + "_f32");
    }
  }
}

Quantizer::~Quantizer() = default;
Quantizer::Quantizer(Quantizer&&) noexcept = default;
Quantizer& Quantizer::operator=(Quantizer&&) noexcept = default;

const QuantizerOptions& Quantizer::options() const { return state_->options; }

namespace {

// Launches `kernel` over items × rows work-items, rounded up to whole work-groups (a marker
// that honours the wait list when there is no work).
cl::Event launch(const Context& ctx, cl::Kernel& kernel, std::int64_t items, std::int64_t rows,
                 const std::array<std::size_t, 2>& local, const std::vector<cl::Event>& wait_for, const char* call) {
  cl::Event event;
  const std::vector<cl::Event>* wait = wait_for.empty() ? nullptr : &wait_for;
  cl_int err = CL_SUCCESS;
  if (items == 0 || rows == 0) {
    err = opencl::enqueue_marker(ctx.queue(), wait, &event);
    check_cl(err, "{}: enqueueing a marker for an empty matrix", call);
    return event;
  }
  const cl::NDRange global(round_up(static_cast<std::size_t>(items), local[0]),
                           round_up(static_cast<std::size_t>(rows), local[1]));
  err = opencl::enqueue_kernel(ctx.queue(), kernel, global, cl::NDRange(local[0], local[1]), wait, &event);
  check_cl(err, "{}: enqueueing a {} × {} grid with work-groups of {} × {}", call, global[0], global[1], local[0],
           local[1]);
  return event;
}

template <typename... Args>
void set_args(cl::Kernel& kernel, const char* call, const Args&... args) {
  cl_uint index = 0;
  auto set = [&](const auto& arg) {
    check_cl(kernel.setArg(index, arg), "{}: setting kernel argument {}", call, index);
    ++index;
  };
  (set(args), ...);
}

}  // namespace

cl::Event Quantizer::quantize(const Fp4MatrixShape& shape, const cl::Buffer& input, float gs_quant,
                              const cl::Buffer& packed, const cl::Buffer& scales,
                              const std::vector<cl::Event>& wait_for) {
  constexpr const char* call = "Quantizer::quantize";
  check_shape(shape, call);
  check_global_scale(call, "gs_quant", shape.format, gs_quant);
  check_buffer(state_->ctx, input, shape.rows * shape.cols * 2, call, "BF16 input", shape);
  check_buffer(state_->ctx, packed, shape.packed_bytes(), call, "packed", shape);
  check_buffer(state_->ctx, scales, shape.scale_bytes(), call, "scales", shape);
  check_distinct(input, "input", packed, "packed", call);
  check_distinct(input, "input", scales, "scales", call);
  check_distinct(packed, "packed", scales, "scales", call);

  cl::Kernel& kernel = state_->quantize[index_of(shape.format)][index_of(shape.scale_layout)];
  const auto rows = static_cast<cl_uint>(shape.rows), cols = static_cast<cl_uint>(shape.cols);
  const std::size_t per_item = state_->options.blocks_per_item;
  const auto blocks_per_item = static_cast<cl_uint>(per_item);
  if (shape.format == WeightFormat::nvfp4) {
    set_args(kernel, call, input, packed, scales, rows, cols, gs_quant, blocks_per_item);
  } else {
    set_args(kernel, call, input, packed, scales, rows, cols, blocks_per_item);
  }
  const bool swizzled = shape.scale_layout == ScaleLayout::swizzled;
  const std::int64_t grid_cols = swizzled ? swizzled_padded_cols(shape.scale_cols()) : shape.scale_cols();
  const std::int64_t grid_rows = swizzled ? swizzled_padded_rows(shape.rows) : shape.rows;
  return launch(state_->ctx, kernel, items_along(grid_cols, per_item), grid_rows, state_->options.local_size, wait_for,
                call);
}

cl::Event Quantizer::dequantize(const Fp4MatrixShape& shape, const cl::Buffer& packed, const cl::Buffer& scales,
                                float gs_dequant, DequantizedType type, const cl::Buffer& output,
                                const std::vector<cl::Event>& wait_for) {
  constexpr const char* call = "Quantizer::dequantize";
  check_shape(shape, call);
  check_global_scale(call, "gs_dequant", shape.format, gs_dequant);
  check_buffer(state_->ctx, packed, shape.packed_bytes(), call, "packed", shape);
  check_buffer(state_->ctx, scales, shape.scale_bytes(), call, "scales", shape);
  const std::int64_t element_bytes = type == DequantizedType::bf16 ? 2 : 4;
  check_buffer(state_->ctx, output, shape.rows * shape.cols * element_bytes, call, "output", shape);
  check_distinct(output, "output", packed, "packed", call);
  check_distinct(output, "output", scales, "scales", call);

  cl::Kernel& kernel = state_->dequantize[index_of(shape.format)][index_of(shape.scale_layout)][index_of(type)];
  const auto rows = static_cast<cl_uint>(shape.rows), cols = static_cast<cl_uint>(shape.cols);
  const std::size_t per_item = state_->options.blocks_per_item;
  const auto blocks_per_item = static_cast<cl_uint>(per_item);
  if (shape.format == WeightFormat::nvfp4) {
    set_args(kernel, call, packed, scales, output, rows, cols, gs_dequant, blocks_per_item);
  } else {
    set_args(kernel, call, packed, scales, output, rows, cols, blocks_per_item);
  }
  return launch(state_->ctx, kernel, items_along(shape.scale_cols(), per_item), shape.rows, state_->options.local_size,
                wait_for, call);
}

}  // namespace fp4cl
