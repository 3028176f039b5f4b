// Strategy "gemv_split": kernels/linear_gemv_split.cl, the GPU GEMV on the split layout (the MoE
// split strategy's design, prepare/fp4_split_layout.hpp): rows split over SPLIT_LANES work-items,
// coalesced 128-bit weight loads, all tokens of a call (up to SPLIT_TOKENS) in one work-group per
// row tile so the weights stream once, activations staged in local memory (quantized there under
// W4A4), a fixed-order local reduction. It reads the BF16 input itself (no activation pre-pass,
// no workspace), except W4A4 calls of SPLIT_PREPASS_TOKENS or more tokens, whose activations the
// shared pre-pass (linear_activations.cl) quantizes once into the workspace: quantizing inside
// the kernel costs every work-group all of the call's tokens. Decode on GPUs; forcible anywhere
// (it runs on PoCL, slowly, for the tests).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cl/opencl_calls.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/device_codes_and_scales.hpp"
#include "kernels/linear_activation_pass.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "kernels/moe_build_options.hpp"
#include "prepare/fp4_row_layout.hpp"  // kFp4RowStep, the pre-pass rows' padding
#include "prepare/fp4_split_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

struct DeviceFp4SplitWeight : DeviceCodesAndScales {
  std::int64_t n = 0, k = 0, kpad = 0;
  int lanes = 1, scale_exp = 0, e2m1_exp = -126;
};

bool power_of_two(long long v) { return v > 0 && (v & (v - 1)) == 0; }

class GemvSplitKernel final : public LinearKernel {
 public:
  Verdict is_supported(const Context& ctx) const override {
    (void)ctx;  // OpenCL C 1.2 with local memory and barriers: any device (fast where lanes are SIMT threads)
    return Verdict::yes();
  }

  Verdict can_implement(const LinearConfig& config) const override {
    if (config.k % block_size(config.scheme.weight) != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of the block size", config.k));
    const long long lanes_max = value(config, "SPLIT_LANES"), local = value(config, "SPLIT_LOCAL");
    const long long rpg = value(config, "SPLIT_RPG"), tokens = value(config, "SPLIT_TOKENS");
    const long long stage = value(config, "SPLIT_STAGE"), prepass = value(config, "SPLIT_PREPASS_TOKENS");
    if (prepass < 0) return Verdict::no(fmt::format("SPLIT_PREPASS_TOKENS = {} is negative (0: never)", prepass));
    if (!power_of_two(lanes_max) || lanes_max > 32)
      return Verdict::no(fmt::format("SPLIT_LANES = {} is not a power of two in 1..32", lanes_max));
    if (local < 1 || local > 1024 || local % lanes_max != 0)
      return Verdict::no(fmt::format("SPLIT_LOCAL = {} is not a multiple of SPLIT_LANES = {} in 1..1024", local, lanes_max));
    if (rpg < 1 || rpg > 8) return Verdict::no(fmt::format("SPLIT_RPG = {} is outside 1..8", rpg));
    if (!power_of_two(tokens) || tokens > 16)
      return Verdict::no(fmt::format("SPLIT_TOKENS = {} is not 1, 2, 4, 8 or 16", tokens));
    const long long lanes = lanes_for(config);
    if (stage < tokens * 32 * lanes || stage > 16384)
      return Verdict::no(fmt::format("SPLIT_STAGE = {} floats: must hold one step of SPLIT_TOKENS = {} tokens "
                                     "({} floats with {} lanes) and be at most 16384",
                                     stage, tokens, tokens * 32 * lanes, lanes));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime, DeviceKind device) const override {
    if (device != DeviceKind::gpu)
      return Verdict::no("a GPU kernel: lanes of a row in lock-step, local-memory staging and barriers, which a "
                         "CPU runs as loops over work-items");
    if (regime == LinearRegime::prefill)
      return Verdict::no("a GEMV: it streams the weights again for every SPLIT_TOKENS tokens");
    return Verdict::yes();
  }

  void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
               WeightLayouts& layouts) override {
    const bool nvfp4_w4a4 = config.scheme.weight == WeightFormat::nvfp4 && !config.scheme.w4a16();
    // The E2M1 decode and exact division, decided as for the MoE kernels (FP4CL_MOE_E2M1_DECODE applies).
    const MoeNumerics numerics = moe_numerics(ctx, nvfp4_w4a4);
    lanes_ = static_cast<int>(lanes_for(config));
    weights_ = layouts.get_or_make<DeviceFp4SplitWeight>(
        fmt::format("fp4_split_L{}_e{}", lanes_, numerics.e2m1_exp), [&] {
          const Fp4SplitWeight s = make_fp4_split_weight(weight, lanes_, numerics.e2m1_exp);
          DeviceFp4SplitWeight d;
          d.n = s.n;
          d.k = s.k;
          d.kpad = s.kpad;
          d.lanes = s.lanes;
          d.scale_exp = s.scale_exp;
          d.e2m1_exp = s.e2m1_exp;
          static_cast<DeviceCodesAndScales&>(d) =
              upload_codes_and_scales(ctx, s.layout, fmt::format("FP4 weight [{}, {}]", s.n, s.k), "split layout");
          return d;
        });
    local_ = value(config, "SPLIT_LOCAL");
    rpg_ = value(config, "SPLIT_RPG");
    tokens_ = value(config, "SPLIT_TOKENS");
    stage_ = value(config, "SPLIT_STAGE");
    const std::size_t local_bytes = static_cast<std::size_t>(stage_ + tokens_ * local_ * rpg_) * sizeof(float);
    if (local_bytes > ctx.info().local_mem_bytes)
      fail("linear kernel 'gemv_split': SPLIT_STAGE = {}, SPLIT_TOKENS = {}, SPLIT_LOCAL = {} and SPLIT_RPG = {} need "
           "{} bytes of local memory; {} has {}",
           stage_, tokens_, local_, rpg_, local_bytes, ctx.info().name, ctx.info().local_mem_bytes);

    BuildOptions options = numerics.options;
    options.define("FP4CL_FORMAT_MXFP4", config.scheme.weight == WeightFormat::mxfp4 ? 1 : 0)  // linear_format_options
        .define("SPLIT_LANES", lanes_)
        .define("SPLIT_LOCAL", local_)
        .define("SPLIT_RPG", rpg_)
        .define("SPLIT_TOKENS", tokens_)
        .define("SPLIT_STAGE", stage_);
    BuildOptions direct = options;
    direct.define("LINEAR_W4A4", config.scheme.w4a16() ? 0 : 1);
    kernels_.clear();
    variants_.clear();
    for (long long t = 1; t <= tokens_; t *= 2) {
      kernels_.push_back(ctx.programs().kernel("linear_gemv_split.cl", fmt::format("linear_gemv_split_{}", t), direct));
      variants_.push_back(t);
    }
    // W4A4 calls of prepass_tokens or more: the activation pre-pass, then the kernels on its fp32 rows.
    prepass_tokens_ = config.scheme.w4a16() ? 0 : value(config, "SPLIT_PREPASS_TOKENS");
    if (prepass_tokens_ > config.max_tokens) prepass_tokens_ = 0;
    if (prepass_tokens_ > 0) {
      const std::int64_t xpad = (config.k + kFp4RowStep - 1) / kFp4RowStep * kFp4RowStep;
      activations_.prepare(ctx, config.scheme, config.k, xpad, weight.input_global_scale, config.max_tokens);
      BuildOptions from_pass = options;
      from_pass.define("LINEAR_W4A4", 0).define("SPLIT_X_FLOAT", 1);
      for (long long t = 1; t <= tokens_; t *= 2)
        kernels_.push_back(
            ctx.programs().kernel("linear_gemv_split.cl", fmt::format("linear_gemv_split_{}", t), from_pass));
      prepass_stride_ = xpad;
    }
    // alpha · 2^-(scale_exp + e2m1_exp): the decode's powers of two undone in the epilogue.
    epilogue_ = linear_epilogue_factor(config.scheme, weight, -(weights_->scale_exp + weights_->e2m1_exp));
    const float gs = nvfp4_w4a4 ? weight.input_global_scale : 1.0f;
    set_arg(0, weights_->words, "the weight codes");
    set_arg(1, weights_->scales, "the block scales");
    set_arg(5, static_cast<cl_int>(weights_->n), "n");
    set_arg(6, static_cast<cl_int>(weights_->k), "k");
    set_arg(7, static_cast<cl_int>(weights_->kpad), "the padded k");
    set_arg(9, static_cast<cl_int>(weights_->scale_exp), "the scale exponent");
    set_arg(10, epilogue_, "the epilogue factor");
    set_arg(11, gs, "the activation global scale");
    set_arg(12, static_cast<cl_int>(config.has_bias ? 1 : 0), "the bias flag");
    set_arg(13, static_cast<cl_int>(config.output == OutputType::bf16 ? 1 : 0), "the output type");
    for (std::size_t i = 0; i < kernels_.size(); ++i)
      check_cl(kernels_[i].setArg(14, static_cast<cl_int>(i < variants_.size() ? weights_->k : prepass_stride_)),
               "setting the activation row stride of linear_gemv_split");
  }

  std::size_t workspace_bytes() const override { return prepass_tokens_ > 0 ? activations_.workspace_bytes() : 0; }

  void apply(const Context& ctx, const LinearCall& call) override {
    // The smallest variant that holds all m tokens, else the largest (token groups of SPLIT_TOKENS).
    std::size_t v = 0;
    while (v + 1 < variants_.size() && variants_[v] < call.m) ++v;
    const long long per_group = variants_[v];
    const std::vector<cl::Event>* wait = call.wait;
    const cl::Buffer* x = call.x;
    std::vector<cl::Event> pass;
    if (prepass_tokens_ > 0 && call.m >= prepass_tokens_) {
      pass.push_back(activations_.enqueue(ctx, *call.x, *call.workspace, call.m, call.wait));
      // Recorded at once: when the next command fails, the layer still knows what it enqueued.
      if (call.events) call.events->push_back(pass.front());
      wait = nullptr;  // the queue is in order: the matmul runs after the pass
      x = call.workspace;
      v += variants_.size();
    }
    cl::Kernel& run = kernels_[v];
    check_cl(run.setArg(2, *x), "setting the activations of linear_gemv_split");
    check_cl(run.setArg(3, *call.y), "setting the output of linear_gemv_split");
    check_cl(run.setArg(4, *call.bias), "setting the bias of linear_gemv_split");
    check_cl(run.setArg(8, static_cast<cl_int>(call.m)), "setting the token count of linear_gemv_split");
    const long long rows = local_ / lanes_ * rpg_;
    const auto tiles = static_cast<std::size_t>((weights_->n + rows - 1) / rows);
    const auto token_groups = static_cast<std::size_t>((call.m + per_group - 1) / per_group);
    const auto local = static_cast<std::size_t>(local_);
    cl::Event event;
    check_cl(opencl::enqueue_kernel(ctx.queue(), run, cl::NDRange(tiles * local, token_groups), cl::NDRange(local, 1),
                                    wait, &event),
             "enqueueing linear_gemv_split_{} ({} tokens, n = {}, k = {}{})", per_group, call.m, weights_->n,
             weights_->k, x == call.x ? "" : ", pre-quantized activations");
    if (call.events) call.events->push_back(event);
  }

  std::uint64_t weight_bytes() const override { return weights_ ? weights_->bytes : 0; }

  std::vector<std::string> tuning_parameters() const override {
    return {"SPLIT_LANES", "SPLIT_LOCAL", "SPLIT_RPG", "SPLIT_TOKENS", "SPLIT_STAGE", "SPLIT_PREPASS_TOKENS"};
  }

  std::string describe() const override {
    return fmt::format(
        "gemv_split(SPLIT_LANES={}, SPLIT_LOCAL={}, SPLIT_RPG={}, SPLIT_TOKENS={}, SPLIT_STAGE={}, "
        "SPLIT_PREPASS_TOKENS={})",
        lanes_, local_, rpg_, tokens_, stage_, prepass_tokens_);
  }

 private:
  static long long value(const LinearConfig& config, const std::string& name) {
    return linear_tuning_value(config, "gemv_split", name);
  }
  // The lanes per row: SPLIT_LANES, or fewer where k (padded to 32) is not a multiple of 32·SPLIT_LANES.
  static long long lanes_for(const LinearConfig& config) {
    return std::max(1LL, std::min<long long>(value(config, "SPLIT_LANES"), split_lanes((config.k + 31) / 32 * 32)));
  }

  template <typename T>
  void set_arg(cl_uint index, const T& v, const char* what) {
    for (cl::Kernel& k : kernels_) check_cl(k.setArg(index, v), "setting {} (argument {}) of linear_gemv_split", what, index);
  }

  std::shared_ptr<const DeviceFp4SplitWeight> weights_;
  LinearActivationPass activations_;
  // kernels_: the variants_ on the BF16 input, then (prepass_tokens_ > 0) the same on the pre-pass's rows.
  std::vector<cl::Kernel> kernels_;
  std::vector<long long> variants_;
  long long prepass_tokens_ = 0;
  std::int64_t prepass_stride_ = 0;
  int lanes_ = 1;
  long long local_ = 0, rpg_ = 0, tokens_ = 0, stage_ = 0;
  float epilogue_ = 1.0f;
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_split_kernel() { return std::make_unique<GemvSplitKernel>(); }

}  // namespace fp4cl
