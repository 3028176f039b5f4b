// Strategy "gemv_words": kernels/linear_gemv_words.cl, 16 weight rows per work-item as float16 lanes
// (decode on CPUs with 16-lane vectors). Its weights are the "words" layout
// (prepare/fp4_words_layout.hpp). W4A4 activations come from the same pre-pass as the rows
// kernels'; W4A16 reads the BF16 input itself (converted per work-group into local memory, no
// pre-pass launch) when WORDS_TOKENS rows of it fit in a quarter of the device's local memory.
#include <fmt/format.h>

#include <algorithm>

#include "cl/opencl_calls.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/linear_activation_pass.hpp"
#include "kernels/linear_build_options.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "prepare/fp4_words_layout.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "support/check.hpp"
#include "tuning/tuning_defaults.hpp"

namespace fp4cl {

namespace {

class GemvWordsKernel final : public LinearKernel {
 public:
  Verdict is_supported(const Context& ctx) const override {
    (void)ctx;  // plain OpenCL C 1.2: runs anywhere (fast where vector lanes are SIMD lanes)
    return Verdict::yes();
  }

  Verdict can_implement(const LinearConfig& config) const override {
    if (config.k % kFp4WordChunk != 0 || config.k % block_size(config.scheme.weight) != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of {} and of the block", config.k, kFp4WordChunk));
    const long long tokens = value(config, "WORDS_TOKENS");
    if (tokens < 1 || tokens > 16) return Verdict::no(fmt::format("WORDS_TOKENS = {} is outside 1..16", tokens));
    const long long local = value(config, "WORDS_LOCAL");
    if (local < 1 || local > 1024) return Verdict::no(fmt::format("WORDS_LOCAL = {} is outside 1..1024", local));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime, DeviceKind device) const override {
    if (device != DeviceKind::cpu)
      return Verdict::no("a CPU kernel: each work-item streams its own contiguous rows, which neighbouring "
                         "work-items of a GPU would read uncoalesced");
    if (regime == LinearRegime::prefill)
      return Verdict::no("a GEMV: it decodes the weights again for every WORDS_TOKENS tokens");
    return Verdict::yes();
  }

  void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
               WeightLayouts& layouts) override {
    weights_ = layouts.get_or_make<DeviceFp4WordsLayout>(
        "fp4_words16", [&] { return upload_fp4_words_layout(ctx, make_fp4_words_layout(weight)); });
    max_tokens_ = config.max_tokens;
    tokens_ = value(config, "WORDS_TOKENS");
    local_ = value(config, "WORDS_LOCAL");
    kpad_ = (config.k + kFp4RowStep - 1) / kFp4RowStep * kFp4RowStep;
    k_ = config.k;
    const std::uint64_t x_bytes = static_cast<std::uint64_t>(std::max<long long>(tokens_, 2) * config.k) * sizeof(float);
    bf16_x_ = config.scheme.w4a16() && x_bytes <= ctx.info().local_mem_bytes / 4;
    if (!bf16_x_)
      activations_.prepare(ctx, config.scheme, config.k, kpad_, weight.input_global_scale, config.max_tokens);
    BuildOptions options = linear_format_options(config.scheme.weight);
    options.define("WORDS_TOKENS", tokens_);
    options.define("WORDS_BF16_X", bf16_x_ ? 1 : 0);
    kernels_ = {ctx.programs().kernel("linear_gemv_words.cl", "linear_gemv_words_single", options),
                ctx.programs().kernel("linear_gemv_words.cl", "linear_gemv_words_pair", options),
                ctx.programs().kernel("linear_gemv_words.cl", "linear_gemv_words_tokens", options)};
    const Fp4WordsLayoutInfo& info = weights_->info;
    set_arg(0, weights_->codes, "the weight codes");
    set_arg(1, weights_->scales, "the block scales");
    set_arg(5, static_cast<cl_uint>(info.n), "n");
    set_arg(7, static_cast<cl_uint>(kpad_), "the padded k");
    set_arg(8, static_cast<cl_uint>(info.k), "k");
    set_arg(9, static_cast<cl_int>(info.exp_bias), "the MXFP4 exponent bias");
    set_arg(10, linear_epilogue_factor(config.scheme, weight, info.scale_shift), "the epilogue factor");
    set_arg(11, static_cast<cl_int>(config.has_bias ? 1 : 0), "the bias flag");
    set_arg(12, static_cast<cl_int>(config.output == OutputType::bf16 ? 1 : 0), "the output type");
  }

  std::size_t workspace_bytes() const override { return bf16_x_ ? 0 : activations_.workspace_bytes(); }

  void apply(const Context& ctx, const LinearCall& call) override {
    std::vector<cl::Event> pass;
    if (bf16_x_) {
      if (call.wait) pass = *call.wait;
      set_arg(2, *call.x, "the BF16 activations");
    } else {
      pass.push_back(activations_.enqueue(ctx, *call.x, *call.workspace, call.m, call.wait));
      // Recorded at once: when the next command fails, the layer still knows what it enqueued.
      if (call.events) call.events->push_back(pass.front());
      set_arg(2, *call.workspace, "the split activations");
    }
    set_arg(3, *call.y, "the output");
    set_arg(4, *call.bias, "the bias");
    set_arg(6, static_cast<cl_uint>(call.m), "the token count");
    const std::int64_t per_item = call.m <= 2 ? call.m : tokens_;
    cl::Kernel& run = kernels_[call.m <= 2 ? static_cast<std::size_t>(call.m - 1) : 2];
    // The converted BF16 rows of the group's tokens (one float when unused).
    const std::size_t xl = bf16_x_ ? static_cast<std::size_t>(per_item * k_) * sizeof(float) : sizeof(float);
    check_cl(run.setArg(13, cl::Local(xl)), "setting the local activations (argument 13) of linear_gemv_words");
    const auto local = static_cast<std::size_t>(local_);
    const auto groups = static_cast<std::size_t>(weights_->info.groups);
    const auto token_groups = static_cast<std::size_t>((call.m + per_item - 1) / per_item);
    cl::Event event;
    check_cl(opencl::enqueue_kernel(ctx.queue(), run, cl::NDRange((groups + local - 1) / local * local, token_groups),
                                    cl::NDRange(local, 1), pass.empty() ? nullptr : &pass, &event),
             "enqueueing linear_gemv_words ({} tokens, n = {}, k = {})", call.m, weights_->info.n, weights_->info.k);
    if (call.events) call.events->push_back(event);
  }

  std::uint64_t weight_bytes() const override { return weights_ ? weights_->bytes : 0; }

  std::vector<std::string> tuning_parameters() const override { return {"WORDS_TOKENS", "WORDS_LOCAL"}; }

  std::string describe() const override {
    return fmt::format("gemv_words(WORDS_TOKENS={}, WORDS_LOCAL={})", tokens_, local_);
  }

 private:
  static long long value(const LinearConfig& config, const std::string& name) {
    if (const auto it = config.tuning.find(name); it != config.tuning.end()) return it->second;
    return tuning::linear_default_params(config.device, "gemv_words").at(name);
  }

  template <typename T>
  void set_arg(cl_uint index, const T& v, const char* what) {
    for (cl::Kernel& k : kernels_) check_cl(k.setArg(index, v), "setting {} (argument {}) of linear_gemv_words", what, index);
  }

  std::shared_ptr<const DeviceFp4WordsLayout> weights_;
  LinearActivationPass activations_;
  std::vector<cl::Kernel> kernels_;
  std::int64_t max_tokens_ = 0, kpad_ = 0, k_ = 0;
  long long tokens_ = 0, local_ = 0;
  bool bf16_x_ = false;  // W4A16 reading its BF16 input directly (no pre-pass)
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_words_kernel() { return std::make_unique<GemvWordsKernel>(); }

}  // namespace fp4cl
