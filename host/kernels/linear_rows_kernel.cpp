#include "kernels/linear_rows_kernel.hpp"

#include <algorithm>
#include <cmath>

#include "support/check.hpp"

namespace fp4cl {

float rows_epilogue_factor(const QuantScheme& scheme, const Fp4Weight& w, const Fp4RowLayoutInfo& layout) {
  return linear_epilogue_factor(scheme, w, layout.scale_shift);
}

float linear_epilogue_factor(const QuantScheme& scheme, const Fp4Weight& w, int scale_shift) {
  // alpha = gs_d(input) · gs_d(weight) = input_scale × global_scale as one fp32 product (vLLM's
  // alpha = input_scale * weight_scale_2): the checkpoint's stored dequant-direction scales, not
  // the reciprocal of the quant-direction input_global_scale that quantizes the activations.
  float alpha = 1.0f;
  if (w.format == WeightFormat::nvfp4) alpha = scheme.w4a16() ? w.global_scale : w.input_scale * w.global_scale;
  // Scaling by 2^scale_shift (MXFP4's largest block exponent) is exact unless the result leaves the float range, checked below.
  const float factor = std::ldexp(alpha, scale_shift);
  if (!std::isnormal(alpha) || !std::isnormal(factor))
    fail("the {} layer's output factor alpha · 2^{} = {} · 2^{} is not a normal fp32 number (global scale {}, "
         "input scale {})",
         scheme.name(), scale_shift, alpha, scale_shift, w.global_scale, w.input_scale);
  return factor;
}

long long RowsLinearKernel::tuning_value(const LinearConfig& config, const std::string& name) const {
  return linear_tuning_value(config, strategy_name(), name);
}

Verdict RowsLinearKernel::can_implement(const LinearConfig& config) const {
  if (config.k % block_size(config.scheme.weight) != 0)
    return Verdict::no(fmt::format("k = {} is not a multiple of the block size", config.k));
  if (const long long w = vector_width(config); w != 8 && w != 16)
    return Verdict::no(fmt::format("FP4CL_VEC = {} is not a supported vector width (8 or 16)", w));
  return Verdict::yes();
}

void RowsLinearKernel::prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
                               WeightLayouts& layouts) {
  weights_ = layouts.get_or_make<DeviceFp4RowLayout>(
      "fp4_rows", [&] { return upload_fp4_layout(ctx, make_fp4_row_layout(weight)); });
  max_tokens_ = config.max_tokens;
  epilogue_ = rows_epilogue_factor(config.scheme, weight, weights_->info);
  activations_.prepare(ctx, config.scheme, weights_->info.k, weights_->info.kpad, weight.input_global_scale,
                       config.max_tokens);

  kernels_ = build(ctx, config);
  const Fp4RowLayoutInfo& info = weights_->info;
  set_arg(0, weights_->codes, "the weight codes");
  set_arg(1, weights_->scales, "the block scales");
  set_arg(5, static_cast<cl_uint>(info.n), "n");
  set_arg(7, static_cast<cl_uint>(info.kpad), "the padded k");
  set_arg(8, static_cast<cl_uint>(info.scale_kp), "the scale columns");
  set_arg(9, static_cast<cl_int>(info.exp_bias), "the MXFP4 exponent bias");
  set_arg(10, epilogue_, "the epilogue factor");
  set_arg(11, static_cast<cl_int>(config.has_bias ? 1 : 0), "the bias flag");
  set_arg(12, static_cast<cl_int>(config.output == OutputType::bf16 ? 1 : 0), "the output type");
}

template <typename T>
void RowsLinearKernel::set_arg(cl_uint index, const T& value, const char* what) {
  for (cl::Kernel& k : kernels_) check_cl(k.setArg(index, value), "setting {} (argument {}) of a linear kernel", what, index);
}

std::size_t RowsLinearKernel::workspace_bytes() const { return activations_.workspace_bytes(); }

std::uint64_t RowsLinearKernel::weight_bytes() const { return weights_ ? weights_->bytes : 0; }

void RowsLinearKernel::apply(const Context& ctx, const LinearCall& call) {
  const cl::Event pass = activations_.enqueue(ctx, *call.x, *call.workspace, call.m, call.wait);
  // Recorded at once: when the next command fails, the layer still knows what it enqueued.
  if (call.events) call.events->push_back(pass);
  set_arg(2, *call.workspace, "the split activations");
  set_arg(3, *call.y, "the output");
  set_arg(4, *call.bias, "the bias");
  set_arg(6, static_cast<cl_uint>(call.m), "the token count");
  cl::Event matmul = launch(ctx, call.m, {});  // the queue is in order: it runs after the pass
  if (call.events) call.events->push_back(matmul);
}

}  // namespace fp4cl
