#include "kernels/linear_activation_pass.hpp"

#include "cl/opencl_calls.hpp"
#include "cl/exact_division.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/linear_build_options.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

void LinearActivationPass::prepare(const Context& ctx, const QuantScheme& scheme, std::int64_t k, std::int64_t kpad,
                                   float input_gs_q, std::int64_t max_tokens, ActivationForm form) {
  k_ = k;
  kpad_ = kpad;
  max_tokens_ = max_tokens;
  form_ = form;
  BuildOptions options = linear_format_options(scheme.weight);
  if (form == ActivationForm::int_codes) {
    if (scheme.w4a16()) fail("integer activation codes need FP4 activations (W4A4), not {}", scheme.name());
    if (scheme.weight == WeightFormat::nvfp4) add_exact_division(options, ctx.info(), "linear_activations.cl");
    kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_quantize_fp4_codes", options);
    check_cl(kernel_.setArg(5, input_gs_q), "setting the activation global scale");
    check_cl(kernel_.setArg(6, static_cast<cl_uint>(max_tokens)), "setting the token capacity");
  } else if (form == ActivationForm::int_planes) {
    if (!scheme.w4a16()) fail("integer activation planes are for BF16 activations (W4A16), not {}", scheme.name());
    kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_bf16_int_planes", options);
    check_cl(kernel_.setArg(5, static_cast<cl_uint>(max_tokens)), "setting the token capacity");
  } else if (form == ActivationForm::bf16_rows) {
    if (scheme.w4a16()) fail("BF16 activation rows from the pass need FP4 activations (W4A4), not {}", scheme.name());
    if (scheme.weight == WeightFormat::nvfp4) add_exact_division(options, ctx.info(), "linear_activations.cl");
    kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_quantize_fp4_bf16", options);
    check_cl(kernel_.setArg(5, input_gs_q), "setting the activation global scale");
  } else if (form == ActivationForm::block_scaled) {
    if (scheme.w4a16()) {
      kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_block_scale_bf16", options);
      check_cl(kernel_.setArg(5, static_cast<cl_uint>(max_tokens)), "setting the token capacity");
    } else {
      if (scheme.weight == WeightFormat::nvfp4) add_exact_division(options, ctx.info(), "linear_activations.cl");
      kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_block_scale_fp4", options);
      check_cl(kernel_.setArg(5, input_gs_q), "setting the activation global scale");
      check_cl(kernel_.setArg(6, static_cast<cl_uint>(max_tokens)), "setting the token capacity");
    }
  } else if (scheme.w4a16()) {
    kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_split_bf16", options);
  } else {
    if (scheme.weight == WeightFormat::nvfp4) add_exact_division(options, ctx.info(), "linear_activations.cl");
    kernel_ = ctx.programs().kernel("linear_activations.cl", "linear_quantize_fp4", options);
    check_cl(kernel_.setArg(5, input_gs_q), "setting the activation global scale");
  }
  // A work-item a 64-element step, or (W4A4's BF16 rows and split rows) a block: a GPU then
  // spreads a token over several work-groups (one step a work-item left a 4096-element token to
  // one group of 64: on an H200 21-26 µs for 8 tokens). GPUs want full groups; PoCL runs small
  // groups best (a step's work-items a group).
  item_elements_ = !scheme.w4a16() && (form == ActivationForm::bf16_rows || form == ActivationForm::split_float)
                       ? scheme.block_size()
                       : kFp4RowStep;
  local_ = ctx.info().kind == DeviceKind::gpu ? 64 : static_cast<std::size_t>(kFp4RowStep / item_elements_);
}

std::size_t LinearActivationPass::workspace_bytes() const {
  if (form_ == ActivationForm::int_codes)
    return scales_offset() + static_cast<std::size_t>(max_tokens_ * (kpad_ / 16)) * sizeof(float);
  // The hi plane, the offsets -12·Σq (a quarter plane), the float2 factors (half a plane), the lo plane.
  if (form_ == ActivationForm::int_planes) return static_cast<std::size_t>(max_tokens_ * kpad_) * 4;
  if (form_ == ActivationForm::bf16_rows) return static_cast<std::size_t>(max_tokens_ * k_) * sizeof(std::uint16_t);
  if (form_ == ActivationForm::block_scaled)
    return factors_offset() + static_cast<std::size_t>(max_tokens_ * (kpad_ / 16)) * sizeof(float);
  return static_cast<std::size_t>(max_tokens_ * kpad_) * sizeof(float);
}

std::size_t LinearActivationPass::factors_offset() const {
  return static_cast<std::size_t>(max_tokens_ * kpad_) * sizeof(float);
}

std::size_t LinearActivationPass::chunk_offsets_offset() const {
  return static_cast<std::size_t>(max_tokens_ * kpad_) * sizeof(std::int8_t);
}

// After the int8 codes (KPAD bytes per token) and their chunk offsets (KPAD/16 ints, KPAD/4 bytes).
std::size_t LinearActivationPass::scales_offset() const {
  return static_cast<std::size_t>(max_tokens_ * kpad_) * 2;
}

cl::Event LinearActivationPass::enqueue(const Context& ctx, const cl::Buffer& x, const cl::Buffer& workspace,
                                        std::int64_t m, const std::vector<cl::Event>* wait) {
  check_cl(kernel_.setArg(0, x), "setting the activations");
  check_cl(kernel_.setArg(1, workspace), "setting the workspace");
  check_cl(kernel_.setArg(2, static_cast<cl_uint>(m)), "setting the token count");
  check_cl(kernel_.setArg(3, static_cast<cl_uint>(k_)), "setting k");
  check_cl(kernel_.setArg(4, static_cast<cl_uint>(kpad_)), "setting the padded k");
  // Work-items along a row (BF16 rows: k elements; the other forms: kpad).
  const std::size_t items = static_cast<std::size_t>((form_ == ActivationForm::bf16_rows ? k_ : kpad_) / item_elements_);
  const std::size_t global0 = (items + local_ - 1) / local_ * local_;
  cl::Event event;
  check_cl(opencl::enqueue_kernel(ctx.queue(), kernel_, cl::NDRange(global0, static_cast<std::size_t>(m)),
                                  cl::NDRange(local_, 1), wait, &event),
           "enqueueing the linear activation pass ({} tokens, k = {})", m, k_);
  return event;
}

}  // namespace fp4cl
