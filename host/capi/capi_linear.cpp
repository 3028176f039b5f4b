// C API: linear layers (fp4cl_linear_*).
#include <limits>
#include <memory>
#include <string>

#include "capi/capi_internal.hpp"
#include "cl/opencl_calls.hpp"

using fp4cl::capi::guarded;
using fp4cl::capi::raise;
using fp4cl::capi::require;

namespace {

fp4cl::LinearOptions linear_options(const fp4cl_linear_options* options) {
  fp4cl_linear_options o;
  fp4cl_linear_options_init(&o);
  if (options) o = *options;
  fp4cl::capi::check_capacity_and_output(o.max_tokens, o.output);
  fp4cl::LinearOptions out;
  out.max_tokens = o.max_tokens;
  out.output = o.output == FP4CL_DTYPE_BF16 ? fp4cl::OutputType::bf16 : fp4cl::OutputType::fp32;
  return out;
}

void create_linear(fp4cl_model* model, const fp4cl::CheckpointLayer& layer, const fp4cl_linear_options* options,
                   fp4cl_linear** out) {
  if (layer.kind != fp4cl::LayerKind::linear)
    raise(FP4CL_ERROR_NOT_FOUND, "'{}' is an MoE layer, not a linear layer (use fp4cl_model_get_moe)", layer.name);
  const fp4cl::LinearOptions o = linear_options(options);
  fp4cl::Linear linear = fp4cl::Linear::from_checkpoint(model->ctx, model->checkpoint, layer.name, o);
  auto handle = std::unique_ptr<fp4cl_linear>(new fp4cl_linear{model->ctx, std::move(linear), {}, {}});
  *out = handle.release();
}

std::size_t output_bytes(const fp4cl::Linear& layer) {
  return layer.options().output == fp4cl::OutputType::bf16 ? 2 : 4;
}

void check_tokens(std::int64_t m) {
  if (m < 0) raise(FP4CL_ERROR_INVALID_ARGUMENT, "m = {} tokens: must be at least 0", m);
  // More than max_tokens run in chunks of max_tokens (the C++ layer does it).
  if (m > std::numeric_limits<std::int32_t>::max())
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "m = {} tokens: at most 2^31-1 per call", m);
}

}  // namespace

extern "C" {

void fp4cl_linear_options_init(fp4cl_linear_options* options) {
  if (!options) return;
  *options = fp4cl_linear_options{};
  options->max_tokens = 512;
  options->output = FP4CL_DTYPE_BF16;
}

fp4cl_status fp4cl_model_get_linear(fp4cl_model* model, const char* name, const fp4cl_linear_options* options,
                                    fp4cl_linear** out) {
  return guarded("fp4cl_model_get_linear", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    const std::size_t index = fp4cl::capi::find_layer(*model, name);
    create_linear(model, fp4cl::capi::layer_at(*model, index), options, out);
  });
}

fp4cl_status fp4cl_model_get_linear_at(fp4cl_model* model, size_t index, const fp4cl_linear_options* options,
                                       fp4cl_linear** out) {
  return guarded("fp4cl_model_get_linear_at", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    create_linear(model, fp4cl::capi::layer_at(*model, index), options, out);
  });
}

void fp4cl_linear_release(fp4cl_linear* layer) { delete layer; }

fp4cl_status fp4cl_linear_get_info(const fp4cl_linear* layer, fp4cl_linear_info* info) {
  return guarded("fp4cl_linear_get_info", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    require(info, "info");
    const fp4cl::Linear& l = layer->layer;
    fp4cl_linear_info i{};
    i.n = l.n();
    i.k = l.k();
    i.max_tokens = l.options().max_tokens;
    i.weight_format = l.scheme().weight == fp4cl::WeightFormat::nvfp4 ? FP4CL_WEIGHT_NVFP4 : FP4CL_WEIGHT_MXFP4;
    i.activations = l.scheme().w4a16() ? FP4CL_ACTIVATIONS_BF16 : FP4CL_ACTIVATIONS_FP4;
    i.output = l.options().output == fp4cl::OutputType::bf16 ? FP4CL_DTYPE_BF16 : FP4CL_DTYPE_FP32;
    *info = i;
  });
}

fp4cl_status fp4cl_linear_describe_kernel(const fp4cl_linear* layer, int64_t m, char* buffer, size_t size,
                                          size_t* length) {
  return guarded("fp4cl_linear_describe_kernel", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    if (m < 1 || m > INT32_MAX) raise(FP4CL_ERROR_INVALID_ARGUMENT, "m = {}: must be 1 to 2^31 - 1", m);
    fp4cl::capi::copy_text(layer->layer.kernel_description(m), buffer, size, length);
  });
}

fp4cl_status fp4cl_linear_enqueue(fp4cl_linear* layer, cl_mem x, cl_mem y, int64_t m, cl_uint num_wait,
                                  const cl_event* wait_list, cl_event* done) {
  return guarded("fp4cl_linear_enqueue", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    check_tokens(m);
    const cl::Buffer xb = fp4cl::capi::wrap_buffer(layer->ctx, x, "x");
    const cl::Buffer yb = fp4cl::capi::wrap_buffer(layer->ctx, y, "y");
    const std::vector<cl::Event> wait = fp4cl::capi::wrap_wait_list(num_wait, wait_list);
    const cl::Event event = layer->layer.enqueue(xb, yb, m, wait);
    fp4cl::capi::hand_out_event(layer->ctx, event, wait, done);
  });
}

fp4cl_status fp4cl_linear_run(fp4cl_linear* layer, const uint16_t* x, size_t x_bytes, int64_t m, void* y,
                              size_t y_bytes) {
  return guarded("fp4cl_linear_run", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    fp4cl::Linear& l = layer->layer;
    check_tokens(m);
    if (m == 0) return;
    require(x, "x");
    require(y, "y");
    const std::size_t x_need = fp4cl::capi::checked_bytes(m * l.k(), 2, "x");
    const std::size_t y_need = fp4cl::capi::checked_bytes(m * l.n(), output_bytes(l), "y");
    fp4cl::capi::require_bytes("x", x_bytes, x_need, fmt::format("[m, k] = [{}, {}] BF16", m, l.k()));
    fp4cl::capi::require_bytes("y", y_bytes, y_need,
                               fmt::format("[m, n] = [{}, {}] {}", m, l.n(), fp4cl::to_string(l.options().output)));
    const cl::Buffer& xb = fp4cl::capi::staging_for(layer->ctx, layer->x, x_need, "x");
    const cl::Buffer& yb = fp4cl::capi::staging_for(layer->ctx, layer->y, y_need, "y");
    const cl::CommandQueue& queue = layer->ctx.queue();
    cl::Event written;
    fp4cl::capi::check(fp4cl::opencl::enqueue_write(queue, xb, true, 0, x_need, x, nullptr, &written), "writing x");
    const cl::Event event = l.enqueue(xb, yb, m, {written});
    const std::vector<cl::Event> wait{event};
    fp4cl::capi::check(fp4cl::opencl::enqueue_read(queue, yb, true, 0, y_need, y, &wait, nullptr), "reading y");
  });
}

}  // extern "C"
