// Strategy "gemv_int": kernels/linear_gemv_int.cl, decode on CPUs in integer arithmetic (16 weight
// rows per work-item; block sums of E2M1 products as integers: vpshufb, vpmaddubsw and vpmaddwd
// where the OpenCL compiler offers the AVX2 builtins, plain OpenCL C otherwise or with
// FP4CL_LINEAR_AVX2=0, for comparison; both give the same bits). Its weights are the lanes layout in
// by_quad order. W4A4: its activations are the pre-pass's int8 codes, chunk offsets and block
// scales, and the sums are exact. W4A16: the activations are the pre-pass's 15-bit integers on a
// grid per 16-element chunk, in two int8 planes (exact for elements within 2^7 of their chunk's
// largest, rounded to nearest below; FP4CL_W4A16_INT=0 refuses W4A16 here, so that automatic
// selection keeps the exact products of gemv_denorm or gemv_lanes). Argument 13: the token
// capacity, where the sums and scales start. The rest is linear_lane_groups_kernel.hpp's.
#include <fmt/format.h>

#include <string>

#include "kernels/linear_lane_groups_kernel.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "kernels/w4a16_int_switch.hpp"
#include "prepare/fp4_lanes_layout.hpp"
#include "support/check.hpp"
#include "support/env_switch.hpp"

namespace fp4cl {

namespace {

class GemvIntKernel final : public LaneGroupsGemvKernel {
 public:
  GemvIntKernel() : LaneGroupsGemvKernel("gemv_int", "INT") {}

 protected:
  Verdict can_take(const LinearConfig& config) const override {
    if (config.scheme.w4a16() && !w4a16_int_enabled())
      return Verdict::no("FP4CL_W4A16_INT=0: BF16 activations (W4A16) are not rounded to integers");
    if (config.k % kFp4LaneChunk != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of {}", config.k, kFp4LaneChunk));
    return Verdict::yes();
  }

  std::shared_ptr<const DeviceFp4LaneGroups> take_weights(const Context& ctx, const Fp4Weight& weight,
                                                          WeightLayouts& layouts) const override {
    return layouts.get_or_make<DeviceFp4LaneGroups>("fp4_lanes16_quads", [&] {
      return upload_fp4_layout(ctx, make_fp4_lanes_layout(weight, Fp4LanesOrder::by_quad));
    });
  }

  ActivationForm activation_form(const Context& ctx, const LinearConfig& config) const override {
    (void)ctx;
    return config.scheme.w4a16() ? ActivationForm::int_planes : ActivationForm::int_codes;
  }

  std::vector<std::string> own_tuning_parameters() const override { return {"INT_PREFETCH"}; }

  void add_options(const Context& ctx, const LinearConfig& config, BuildOptions& options) const override {
    (void)ctx;
    // Software prefetch of the weights INT_PREFETCH lines of 64 bytes ahead (0: none).
    const long long prefetch = linear_tuning_value(config, "gemv_int", "INT_PREFETCH");
    if (prefetch < 0 || prefetch > 4096) fail("INT_PREFETCH = {} is outside 0..4096", prefetch);
    options.define("INT_PREFETCH", prefetch);
    options.define("INT_PLANES", config.scheme.w4a16() ? 2 : 1);
    const std::string choice = env_switch("FP4CL_LINEAR_AVX2", {"0", "1"},
                                          "0 (the portable OpenCL C sums) or 1 (AVX2 byte multiply-adds where the "
                                          "compiler offers them, the default)");
    if (choice == "0") options.define("INT_NO_X86");
  }

  void set_own_arguments(const LinearConfig& config) override {
    set_arg(13, static_cast<cl_uint>(config.max_tokens), "the token capacity");
  }
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_int_kernel() { return std::make_unique<GemvIntKernel>(); }

}  // namespace fp4cl
