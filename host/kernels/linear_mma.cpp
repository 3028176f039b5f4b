// Strategy "mma": kernels/linear_mma.cl, the linear layer on tensor cores (m16n8k16 BF16 MMAs
// with fp32 accumulation, the MoE `mma` strategy's K loop for one matrix) over the weight in the
// MMA layout (prepare/fp4_mma_layout.hpp). W4A16 reads the caller's BF16 rows as B fragments;
// W4A4 first quantizes them with the shared activation pre-pass into BF16 rows of e2m1 × block
// scale (linear_activations.cl, linear_quantize_fp4_bf16: FP4.md's recipes) and reads those; calls
// of up to MMA_QUANT_TOKENS tokens (decode) instead quantize them inside the kernel, into local
// memory (the same values, one launch fewer; every work-group quantizes all of the call's tokens).
// Selected automatically only where the MMA is native (inline PTX: NVIDIA, compute capability
// >= 8.0), for decode and prefill; elsewhere it runs an emulated MMA (portable OpenCL C, slow) when
// forced: the tests run it on PoCL.
//
// Tuning: MMA_NT (the largest token tile built, 8·MMA_NT tokens; tiles of 8, 16, ... up to it
// are built and a call takes the smallest that holds its tokens), MMA_MT (row tiles of 16 per
// warp, sharing each B fragment: prefill; the largest divisor of N / 16 up to it), MMA_RT (warps
// along the rows per work-group, the largest divisor of N / 16 / MMA_MT up to it), MMA_KSPLIT (warps splitting K; 0: from
// the shape alone, mma_auto_split_k: enough warps to fill the device at one token, fewer where
// the work-group would not fit the device's local memory or work-group size), MMA_UNROLL
// (chunks of weights loaded ahead), MMA_QUANT_TOKENS (W4A4: the most tokens quantized inside the
// kernel, fewer where K · 4 bytes a token do not fit in local memory; 0: always the pre-pass).
#include <fmt/format.h>

#include <algorithm>

#include "cl/exact_division.hpp"
#include "cl/kernel_limits.hpp"
#include "cl/opencl_calls.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/device_codes_and_scales.hpp"
#include "kernels/linear_activation_pass.hpp"
#include "kernels/linear_build_options.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "kernels/moe_registry.hpp"  // mma_native, mma_auto_split_k, largest_divisor_within
#include "prepare/fp4_mma_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

struct DeviceFp4MmaWeight : DeviceCodesAndScales {
  std::int64_t n = 0, k = 0;
  int scale_exp = 0;
};

class LinearMmaKernel final : public LinearKernel {
 public:
  Verdict is_supported(const Context& ctx) const override {
    if (mma_native(ctx.info())) return Verdict::yes();
    // The emulated MMA multiplies the decoded weights (BF16 subnormals) in fp32.
    if (!ctx.info().fp32_denormals)
      return Verdict::no("the emulated MMA (no tensor cores) needs fp32 denormals, which the device flushes");
    return Verdict::yes();
  }

  Verdict can_implement(const LinearConfig& config) const override {
    if (config.n % 16 != 0)
      return Verdict::no(fmt::format("n = {} is not a multiple of 16 (the MMA layout's row tiles)", config.n));
    if (config.k % 64 != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of 64 (the MMA layout's chunks)", config.k));
    const long long nt = value(config, "MMA_NT"), rt = value(config, "MMA_RT");
    const long long ks = value(config, "MMA_KSPLIT"), unroll = value(config, "MMA_UNROLL");
    if (nt != 1 && nt != 2 && nt != 4 && nt != 8)
      return Verdict::no(fmt::format("MMA_NT = {} is not 1, 2, 4 or 8", nt));
    if (rt < 1 || rt > 8) return Verdict::no(fmt::format("MMA_RT = {} is outside 1..8", rt));
    if (const long long mt = value(config, "MMA_MT"); mt < 1 || mt > 4)
      return Verdict::no(fmt::format("MMA_MT = {} is outside 1..4", mt));
    if (ks < 0 || ks > 32) return Verdict::no(fmt::format("MMA_KSPLIT = {} is outside 0..32 (0: from the shape)", ks));
    if (ks > 0 && (config.k / 64) % ks != 0)
      return Verdict::no(
          fmt::format("MMA_KSPLIT = {} does not divide the k / 64 = {} chunks of the layer", ks, config.k / 64));
    if (unroll < 1 || unroll > 8) return Verdict::no(fmt::format("MMA_UNROLL = {} is outside 1..8", unroll));
    if (const long long q = value(config, "MMA_QUANT_TOKENS"); q < 0 || q > 8)
      return Verdict::no(fmt::format("MMA_QUANT_TOKENS = {} is outside 0..8", q));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime, DeviceKind device) const override {
    (void)regime;  // tensor cores serve one token (8 columns, memory-bound) and many alike
    if (device != DeviceKind::gpu)
      return Verdict::no("a tensor-core kernel: on a CPU its MMA is emulated (for the tests only)");
    return Verdict::yes();
  }

  Verdict selectable(const DeviceInfo& device) const override {
    if (!mma_native(device))
      return Verdict::no("no native MMA (inline PTX mma.sync needs an NVIDIA GPU of compute capability 8.0 or "
                         "more); the emulation runs only when forced");
    return Verdict::yes();
  }

  void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
               WeightLayouts& layouts) override {
    weights_ = layouts.get_or_make<DeviceFp4MmaWeight>("fp4_mma", [&] {
      const Fp4MmaWeight m = make_fp4_mma_weight(weight);
      DeviceFp4MmaWeight d;
      d.n = m.n;
      d.k = m.k;
      d.scale_exp = m.scale_exp;
      static_cast<DeviceCodesAndScales&>(d) =
          upload_codes_and_scales(ctx, m.layout, fmt::format("FP4 weight [{}, {}]", m.n, m.k), "MMA layout");
      return d;
    });
    nt_ = value(config, "MMA_NT");
    mt_ = largest_divisor_within(config.n / 16, value(config, "MMA_MT"));
    rt_ = largest_divisor_within(config.n / 16 / mt_, value(config, "MMA_RT"));
    unroll_ = value(config, "MMA_UNROLL");
    const bool native = mma_native(ctx.info());
    // The partial sums, for tiles of nt MMAs of 8 tokens.
    const auto local_for = [&](long long nt) { return static_cast<std::uint64_t>(ks_ * rt_ * mt_ * nt * 128) * 4; };
    ks_ = value(config, "MMA_KSPLIT");
    if (ks_ == 0) {  // from the shape, then fewer warps while the work-group does not fit the device
      ks_ = mma_auto_split_k(config.k, config.n, 1);
      while (ks_ > 1 && (local_for(nt_) > ctx.info().local_mem_bytes ||
                         static_cast<std::size_t>(32 * rt_ * ks_) > ctx.info().max_work_group_size))
        ks_ = largest_divisor_within(config.k / 64, ks_ - 1);
    }
    const std::size_t local_items = static_cast<std::size_t>(32 * rt_ * ks_);
    const std::uint64_t local_bytes = local_for(nt_);
    if (local_items > ctx.info().max_work_group_size)
      fail("linear kernel 'mma': MMA_RT = {} × MMA_KSPLIT = {} warps are {} work-items; {} allows {}", rt_,
           ks_, local_items, ctx.info().name, ctx.info().max_work_group_size);
    if (local_bytes > ctx.info().local_mem_bytes)
      fail("linear kernel 'mma': MMA_KSPLIT = {}, MMA_RT = {}, MMA_MT = {} and MMA_NT = {} need {} bytes of local "
           "memory for the partial sums; {} has {}",
           ks_, rt_, mt_, nt_, local_bytes, ctx.info().name, ctx.info().local_mem_bytes);

    BuildOptions options = linear_format_options(config.scheme.weight);
    options.define("FP4_MMA_PTX", native ? 1 : 0)
        .define("MMA_RT", rt_)
        .define("MMA_MT", mt_)
        .define("MMA_KSPLIT", ks_)
        .define("MMA_UNROLL", unroll_);
    kernels_.clear();
    variants_.clear();
    for (long long t = 1; t <= nt_; t *= 2) {
      BuildOptions o = options;
      o.define("MMA_NT", t);
      kernels_.push_back(ctx.programs().kernel("linear_mma.cl", "linear_mma", o));
      variants_.push_back(t);
    }
    w4a4_ = !config.scheme.w4a16();
    // W4A4 calls of up to quant_tokens_ tokens: quantized inside the kernel (tiles of 8 tokens),
    // as many tokens as local memory holds besides the partial sums.
    quant_tokens_ = 0;
    if (w4a4_) {
      quant_tokens_ = std::min<long long>(value(config, "MMA_QUANT_TOKENS"), config.max_tokens);
      while (quant_tokens_ > 0 &&
             local_for(1) + static_cast<std::uint64_t>(quant_tokens_ * config.k) * 2 > ctx.info().local_mem_bytes)
        --quant_tokens_;
    }
    if (quant_tokens_ > 0) {
      BuildOptions o = options;
      o.define("MMA_NT", 1).define("MMA_X_QUANT", quant_tokens_).define("MMA_K", config.k);
      if (config.scheme.weight == WeightFormat::nvfp4) add_exact_division(o, ctx.info(), "linear_mma.cl");
      kernels_.push_back(ctx.programs().kernel("linear_mma.cl", "linear_mma", o));
    }
    // Larger W4A4 calls: the activations quantized once per call into BF16 rows of e2m1 × block scale.
    prepass_ = w4a4_ && config.max_tokens > quant_tokens_;
    if (prepass_)
      activations_.prepare(ctx, config.scheme, config.k, config.k, weight.input_global_scale, config.max_tokens,
                           ActivationForm::bf16_rows);
    // alpha · 2^-(scale_exp - 126): the decode's powers of two undone in the epilogue.
    epilogue_ = linear_epilogue_factor(config.scheme, weight, -(weights_->scale_exp - 126));
    const bool nvfp4_w4a4 = w4a4_ && config.scheme.weight == WeightFormat::nvfp4;
    set_arg(0, weights_->words, "the weight codes");
    set_arg(1, weights_->scales, "the block scales");
    set_arg(5, static_cast<cl_int>(weights_->n), "n");
    set_arg(6, static_cast<cl_int>(weights_->k), "k");
    set_arg(8, static_cast<cl_int>(weights_->scale_exp), "the scale exponent");
    set_arg(9, epilogue_, "the epilogue factor");
    set_arg(10, static_cast<cl_int>(config.has_bias ? 1 : 0), "the bias flag");
    set_arg(11, static_cast<cl_int>(config.output == OutputType::bf16 ? 1 : 0), "the output type");
    set_arg(12, nvfp4_w4a4 ? weight.input_global_scale : 1.0f, "the activation global scale");
  }

  std::size_t workspace_bytes() const override { return prepass_ ? activations_.workspace_bytes() : 0; }

  void apply(const Context& ctx, const LinearCall& call) override {
    // The smallest token tile that holds all m tokens, else the largest (several token tiles);
    // W4A4 calls of up to quant_tokens_ tokens: the kernel that quantizes them (after the variants).
    const bool quantize_here = w4a4_ && call.m <= quant_tokens_;
    std::size_t v = 0;
    while (v + 1 < variants_.size() && 8 * variants_[v] < call.m) ++v;
    if (quantize_here) v = variants_.size();
    const long long tile_tokens = quantize_here ? 8 : 8 * variants_[v];
    const bool prepass = w4a4_ && !quantize_here;
    // The kernel's arguments are set before the pre-pass is enqueued: NVIDIA's OpenCL starts a
    // command as it is enqueued, and setting them behind it would leave the GPU idle.
    cl::Kernel& run = kernels_[v];
    check_cl(run.setArg(2, prepass ? *call.workspace : *call.x), "setting the activations of linear_mma");
    check_cl(run.setArg(3, *call.y), "setting the output of linear_mma");
    check_cl(run.setArg(4, *call.bias), "setting the bias of linear_mma");
    check_cl(run.setArg(7, static_cast<cl_int>(call.m)), "setting the token count of linear_mma");
    const std::vector<cl::Event>* wait = call.wait;
    std::vector<cl::Event> pass;
    if (prepass) {
      pass.push_back(activations_.enqueue(ctx, *call.x, *call.workspace, call.m, call.wait));
      // Recorded at once: when the next command fails, the layer still knows what it enqueued.
      if (call.events) call.events->push_back(pass.front());
      wait = nullptr;  // the queue is in order: the matmul runs after the pass
    }
    const auto local = static_cast<std::size_t>(32 * rt_ * ks_);
    const auto groups = static_cast<std::size_t>(weights_->n / (16 * rt_ * mt_));
    const auto token_tiles = static_cast<std::size_t>((call.m + tile_tokens - 1) / tile_tokens);
    cl::Event event;
    if (const cl_int err = opencl::enqueue_kernel(ctx.queue(), run, cl::NDRange(groups * local, token_tiles),
                                                  cl::NDRange(local, 1), wait, &event);
        err != CL_SUCCESS)
      check_cl(err, "enqueueing linear_mma ({} tokens in tiles of {}, n = {}, k = {}{}; work-groups of {}; {})", call.m,
               tile_tokens, weights_->n, weights_->k,
               !w4a4_ ? "" : quantize_here ? ", quantized in the kernel" : ", quantized by the pre-pass", local,
               describe_kernel_limits(run, ctx.device()));
    if (call.events) call.events->push_back(event);
  }

  std::uint64_t weight_bytes() const override { return weights_ ? weights_->bytes : 0; }

  std::vector<std::string> tuning_parameters() const override {
    return {"MMA_NT", "MMA_MT", "MMA_RT", "MMA_KSPLIT", "MMA_UNROLL", "MMA_QUANT_TOKENS"};
  }

  std::string describe() const override {
    return fmt::format("mma(MMA_NT={}, MMA_MT={}, MMA_RT={}, MMA_KSPLIT={}, MMA_UNROLL={}, MMA_QUANT_TOKENS={})", nt_,
                       mt_, rt_, ks_, unroll_, quant_tokens_);
  }

 private:
  static long long value(const LinearConfig& config, const std::string& name) {
    return linear_tuning_value(config, "mma", name);
  }

  template <typename T>
  void set_arg(cl_uint index, const T& v, const char* what) {
    for (cl::Kernel& k : kernels_) check_cl(k.setArg(index, v), "setting {} (argument {}) of linear_mma", what, index);
  }

  std::shared_ptr<const DeviceFp4MmaWeight> weights_;
  LinearActivationPass activations_;
  // One per token tile of variants_[i] MMAs of 8 tokens, then (quant_tokens_ > 0) the W4A4 kernel
  // that quantizes up to quant_tokens_ tokens itself.
  std::vector<cl::Kernel> kernels_;
  std::vector<long long> variants_;
  bool w4a4_ = false, prepass_ = false;
  long long nt_ = 0, mt_ = 0, rt_ = 0, ks_ = 0, unroll_ = 0, quant_tokens_ = 0;
  float epilogue_ = 1.0f;
};

}  // namespace

std::unique_ptr<LinearKernel> make_linear_mma_kernel() { return std::make_unique<LinearMmaKernel>(); }

}  // namespace fp4cl
