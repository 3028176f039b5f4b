#include "kernels/linear_lane_groups_kernel.hpp"

#include <fmt/format.h>

#include <utility>

#include "cl/opencl_calls.hpp"
#include "kernels/cpu_denormal_speed.hpp"
#include "kernels/linear_build_options.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

LaneGroupsGemvKernel::LaneGroupsGemvKernel(std::string strategy, std::string prefix)
    : strategy_(std::move(strategy)), prefix_(std::move(prefix)) {}

long long LaneGroupsGemvKernel::tuning_value(const LinearConfig& config, const char* suffix) const {
  return linear_tuning_value(config, strategy_, prefix_ + suffix);
}

Verdict LaneGroupsGemvKernel::is_supported(const Context& ctx) const {
  // Plain OpenCL C 1.2: runs anywhere (fast where vector lanes are SIMD lanes).
  if (needs_fp32_denormals() && !ctx.info().fp32_denormals)
    return Verdict::no("its E2M1 decode makes fp32 denormals, which the device flushes");
  return Verdict::yes();
}

Verdict LaneGroupsGemvKernel::selectable(const DeviceInfo& device) const {
  if (needs_fp32_denormals() && cpu_fp32_denormals_slow(device))
    return Verdict::no(fmt::format("its E2M1 decode multiplies fp32 denormals, {:.0f}x slower than normal numbers on "
                                   "this processor", host_denormal_speed().ratio()));
  return Verdict::yes();
}

Verdict LaneGroupsGemvKernel::can_implement(const LinearConfig& config) const {
  if (Verdict v = can_take(config); !v) return v;
  const long long tokens = tuning_value(config, "_TOKENS");
  if (tokens < 1 || tokens > 16) return Verdict::no(fmt::format("{}_TOKENS = {} is outside 1..16", prefix_, tokens));
  const long long local = tuning_value(config, "_LOCAL");
  if (local < 1 || local > 1024) return Verdict::no(fmt::format("{}_LOCAL = {} is outside 1..1024", prefix_, local));
  return Verdict::yes();
}

Verdict LaneGroupsGemvKernel::designed_for(LinearRegime regime, DeviceKind device) const {
  if (device != DeviceKind::cpu)
    return Verdict::no("a CPU kernel: each work-item streams its own contiguous rows, which neighbouring "
                       "work-items of a GPU would read uncoalesced");
  if (regime == LinearRegime::prefill)
    return Verdict::no(fmt::format("a GEMV: it decodes the weights again for every {}_TOKENS tokens", prefix_));
  return Verdict::yes();
}

bool LaneGroupsGemvKernel::reads_bf16_input(const Context& ctx, const LinearConfig& config) const {
  (void)ctx, (void)config;
  return false;
}

void LaneGroupsGemvKernel::add_options(const Context& ctx, const LinearConfig& config, BuildOptions& options) const {
  (void)ctx, (void)config, (void)options;
}

std::vector<std::string> LaneGroupsGemvKernel::own_tuning_parameters() const { return {}; }

void LaneGroupsGemvKernel::set_own_arguments(const LinearConfig& config) { (void)config; }

void LaneGroupsGemvKernel::set_call_arguments(cl::Kernel& run, std::int64_t tokens_per_item) {
  (void)run, (void)tokens_per_item;
}

void LaneGroupsGemvKernel::prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
                                   WeightLayouts& layouts) {
  weights_ = take_weights(ctx, weight, layouts);
  tokens_ = tuning_value(config, "_TOKENS");
  local_ = tuning_value(config, "_LOCAL");
  const std::int64_t kpad = (config.k + kFp4RowStep - 1) / kFp4RowStep * kFp4RowStep;
  bf16_x_ = reads_bf16_input(ctx, config);
  form_ = activation_form(ctx, config);
  if (!bf16_x_)
    activations_.prepare(ctx, config.scheme, config.k, kpad, weight.input_global_scale, config.max_tokens, form_);
  BuildOptions options = linear_format_options(config.scheme.weight);
  options.define(prefix_ + "_TOKENS", tokens_);
  add_options(ctx, config, options);
  const std::string file = "linear_" + strategy_ + ".cl";
  kernels_ = {ctx.programs().kernel(file, "linear_" + strategy_ + "_single", options),
              ctx.programs().kernel(file, "linear_" + strategy_ + "_pair", options),
              ctx.programs().kernel(file, "linear_" + strategy_ + "_tokens", options)};
  const Fp4LaneGroupsInfo& info = weights_->info;
  set_arg(0, weights_->codes, "the weight codes");
  set_arg(1, weights_->scales, "the block scales");
  set_arg(5, static_cast<cl_uint>(info.n), "n");
  set_arg(7, static_cast<cl_uint>(kpad), "the padded k");
  set_arg(8, static_cast<cl_uint>(info.k), "k");
  set_arg(9, static_cast<cl_int>(info.exp_bias), "the MXFP4 exponent bias");
  set_arg(10, linear_epilogue_factor(config.scheme, weight, info.scale_shift), "the epilogue factor");
  set_arg(11, static_cast<cl_int>(config.has_bias ? 1 : 0), "the bias flag");
  set_arg(12, static_cast<cl_int>(config.output == OutputType::bf16 ? 1 : 0), "the output type");
  set_own_arguments(config);
}

template <typename T>
void LaneGroupsGemvKernel::set_arg(cl_uint index, const T& value, const char* what) {
  for (cl::Kernel& k : kernels_)
    check_cl(k.setArg(index, value), "setting {} (argument {}) of linear_{}", what, index, strategy_);
}

template void LaneGroupsGemvKernel::set_arg(cl_uint, const cl_uint&, const char*);

std::size_t LaneGroupsGemvKernel::workspace_bytes() const { return bf16_x_ ? 0 : activations_.workspace_bytes(); }

void LaneGroupsGemvKernel::apply(const Context& ctx, const LinearCall& call) {
  const std::vector<cl::Event>* wait = call.wait;
  if (bf16_x_) {
    set_arg(2, *call.x, "the BF16 activations");
  } else {
    const cl::Event pass = activations_.enqueue(ctx, *call.x, *call.workspace, call.m, call.wait);
    // Recorded at once: when the next command fails, the layer still knows what it enqueued.
    if (call.events) call.events->push_back(pass);
    wait = nullptr;  // the queue is in order: the matmul runs after the pass
    set_arg(2, *call.workspace,
            form_ == ActivationForm::int_codes    ? "the activation codes"
            : form_ == ActivationForm::int_planes ? "the activation planes"
            : form_ == ActivationForm::bf16_rows ? "the BF16 activation rows"
                                                 : "the split activations");
  }
  set_arg(3, *call.y, "the output");
  set_arg(4, *call.bias, "the bias");
  set_arg(6, static_cast<cl_uint>(call.m), "the token count");
  const std::int64_t per_item = call.m <= 2 ? call.m : tokens_;
  cl::Kernel& run = kernels_[call.m <= 2 ? static_cast<std::size_t>(call.m - 1) : 2];
  set_call_arguments(run, per_item);
  const auto local = static_cast<std::size_t>(local_);
  const auto groups = static_cast<std::size_t>(weights_->info.groups);
  const auto token_groups = static_cast<std::size_t>((call.m + per_item - 1) / per_item);
  cl::Event event;
  check_cl(opencl::enqueue_kernel(ctx.queue(), run, cl::NDRange((groups + local - 1) / local * local, token_groups),
                                  cl::NDRange(local, 1), wait, &event),
           "enqueueing linear_{} ({} tokens, n = {}, k = {})", strategy_, call.m, weights_->info.n, weights_->info.k);
  if (call.events) call.events->push_back(event);
}

std::uint64_t LaneGroupsGemvKernel::weight_bytes() const { return weights_ ? weights_->bytes : 0; }

std::vector<std::string> LaneGroupsGemvKernel::tuning_parameters() const {
  std::vector<std::string> names = {prefix_ + "_TOKENS", prefix_ + "_LOCAL"};
  for (std::string& n : own_tuning_parameters()) names.push_back(std::move(n));
  return names;
}

std::string LaneGroupsGemvKernel::describe() const {
  return fmt::format("{}({}_TOKENS={}, {}_LOCAL={})", strategy_, prefix_, tokens_, prefix_, local_);
}

}  // namespace fp4cl
