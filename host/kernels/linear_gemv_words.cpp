// Strategy "gemv_words": kernels/linear_gemv_words.cl, 16 weight rows per work-item as float16 lanes
// (decode on CPUs with 16-lane vectors). Its weights are the "words" layout
// (prepare/fp4_words_layout.hpp). W4A4 activations come from the same pre-pass as the rows
// kernels' (as BF16 rows where it uses BF16 dot products); W4A16 reads the BF16 input itself (converted per work-group into local memory,
// argument 13, no pre-pass launch) when WORDS_TOKENS rows of it fit in a quarter of the device's
// local memory. On CPUs with AVX-512 BF16 it uses BF16 dot products (FP4CL_LINEAR_BF16_DOT:
// cpu_bf16_dot.hpp). The rest is linear_lane_groups_kernel.hpp's.
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu_bf16_dot.hpp"
#include "kernels/linear_lane_groups_kernel.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "prepare/fp4_words_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

constexpr const char* kBf16DotEnv = "FP4CL_LINEAR_BF16_DOT";

class GemvWordsKernel final : public LaneGroupsGemvKernel {
 public:
  GemvWordsKernel() : LaneGroupsGemvKernel("gemv_words", "WORDS") {}

  // Its decode is a 16-lane permute (AVX-512). On CPUs whose SIMD holds 8 floats (AVX2) it runs
  // with the 8-entry table (WORDS_LUT8) but slower than gemv_lanes / gemv_int, so automatic
  // selection passes it over there (forced, or from a tuning entry of the device, it runs).
  // Measured on 2 AVX2 cores (PoCL 3.1, pthread-haswell), 4096x4096 M = 1, µs: W4A16 958
  // against gemv_lanes 801, W4A4 1035 against gemv_int 700.
  Verdict selectable(const DeviceInfo& device) const override {
    if (device.kind == DeviceKind::cpu && device.preferred_float_width < 16)
      return Verdict::no(fmt::format("a 16-lane decode; this CPU's SIMD holds {} floats", device.preferred_float_width));
    return Verdict::yes();
  }

 protected:
  Verdict can_take(const LinearConfig& config) const override {
    if (config.k % kFp4WordChunk != 0 || config.k % block_size(config.scheme.weight) != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of {} and of the block", config.k, kFp4WordChunk));
    return Verdict::yes();
  }

  std::shared_ptr<const DeviceFp4LaneGroups> take_weights(const Context& ctx, const Fp4Weight& weight,
                                                          WeightLayouts& layouts) const override {
    return layouts.get_or_make<DeviceFp4LaneGroups>(
        "fp4_words16", [&] { return upload_fp4_layout(ctx, make_fp4_words_layout(weight)); });
  }

  std::vector<std::string> own_tuning_parameters() const override { return {"WORDS_PREFETCH"}; }

  bool reads_bf16_input(const Context& ctx, const LinearConfig& config) const override {
    return config.scheme.w4a16() && rows_fit_local(ctx, config);
  }

  // W4A4 with BF16 dot products: the pass's BF16 rows, read as a W4A16 input is (no packing per
  // work-item; the same local-memory bound, for a compiler without the BF16 path).
  ActivationForm activation_form(const Context& ctx, const LinearConfig& config) const override {
    return !config.scheme.w4a16() && rows_fit_local(ctx, config) && cpu_bf16_dot_enabled(ctx, kBf16DotEnv)
               ? ActivationForm::bf16_rows
               : ActivationForm::split_float;
  }

  // Whether WORDS_TOKENS (at least 2) rows of fp32 activations fit in a quarter of local memory.
  bool rows_fit_local(const Context& ctx, const LinearConfig& config) const {
    const std::uint64_t x_bytes = static_cast<std::uint64_t>(std::max<long long>(tokens(), 2) * config.k) * sizeof(float);
    return x_bytes <= ctx.info().local_mem_bytes / 4;
  }

  void add_options(const Context& ctx, const LinearConfig& config, BuildOptions& options) const override {
    options.define("WORDS_BF16_X", bf16_rows() ? 1 : 0);
    // Software prefetch of the weights WORDS_PREFETCH chunks ahead (0: none) in the BF16 loop.
    const long long prefetch = linear_tuning_value(config, "gemv_words", "WORDS_PREFETCH");
    if (prefetch < 0 || prefetch > 4096) fail("WORDS_PREFETCH = {} is outside 0..4096", prefetch);
    options.define("WORDS_PREFETCH", prefetch);
    // 8-lane SIMD (AVX2): the 8-entry table decode (kernels/linear_gemv_words.cl, WORDS_LUT8).
    if (ctx.info().preferred_float_width < 16) options.define("WORDS_LUT8", 1);
    // AVX-512 BF16 dot products where the CPU has them (kernels/common/bf16_dot.cl), on BF16 rows;
    // required (an error at build time if the OpenCL compiler cannot build them) with
    // FP4CL_LINEAR_BF16_DOT=1.
    if (bf16_rows() && cpu_bf16_dot_enabled(ctx, kBf16DotEnv)) {
      options.define("FP4_DPBF16");
      // The W4A4 pass's rows (NVFP4's are never tiny: the kernel then skips their scan).
      if (!bf16_input()) options.define("WORDS_X_FROM_PASS");
      if (cpu_bf16_dot_required(kBf16DotEnv)) options.define("WORDS_REQUIRE_BF16DOT");
    }
  }

  void set_call_arguments(cl::Kernel& run, std::int64_t tokens_per_item) override {
    // The converted BF16 rows of the group's tokens (one float when unused).
    const std::size_t xl =
        bf16_rows() ? static_cast<std::size_t>(tokens_per_item * layout().k) * sizeof(float) : sizeof(float);
    check_cl(run.setArg(13, cl::Local(xl)), "setting the local activations (argument 13) of linear_gemv_words");
  }
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_words_kernel() { return std::make_unique<GemvWordsKernel>(); }

}  // namespace fp4cl
