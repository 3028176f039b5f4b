// Strategy "gemv_denorm": kernels/linear_gemv_denorm.cl, decode on CPUs (8 weight rows per work-item
// as vector lanes; meant for W4A16 on 8-lane SIMD, where W4A4 has gemv_int): E2M1 decoded by shifts
// into fp32 denormals (e2m1 × 2^-126), activations pre-scaled per 16-element chunk so that every
// product is a normal number. Its
// weights are the words layout with 8 rows in checkpoint order (prepare/fp4_words_layout.hpp);
// its activations the pre-pass's block-scaled rows (argument 13: the token capacity, where the
// chunk factors start). Needs a device that keeps fp32 denormals. The rest is
// linear_lane_groups_kernel.hpp's.
#include <fmt/format.h>

#include "kernels/linear_lane_groups_kernel.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "prepare/fp4_words_layout.hpp"

namespace fp4cl {

namespace {

constexpr std::int64_t kDenormRows = 8;

class GemvDenormKernel final : public LaneGroupsGemvKernel {
 public:
  GemvDenormKernel() : LaneGroupsGemvKernel("gemv_denorm", "DENORM") {}

 protected:
  Verdict can_take(const LinearConfig& config) const override {
    if (config.k % 16 != 0) return Verdict::no(fmt::format("k = {} is not a multiple of 16", config.k));
    return Verdict::yes();
  }

  bool needs_fp32_denormals() const override { return true; }

  std::shared_ptr<const DeviceFp4LaneGroups> take_weights(const Context& ctx, const Fp4Weight& weight,
                                                          WeightLayouts& layouts) const override {
    return layouts.get_or_make<DeviceFp4LaneGroups>("fp4_words8", [&] {
      return upload_fp4_layout(ctx, make_fp4_words_layout(weight, kDenormRows, Fp4WordsOrder::checkpoint));
    });
  }

  ActivationForm activation_form(const Context& ctx, const LinearConfig& config) const override {
    (void)ctx, (void)config;
    return ActivationForm::block_scaled;
  }

  void set_own_arguments(const LinearConfig& config) override {
    set_arg(13, static_cast<cl_uint>(config.max_tokens), "the token capacity");
  }
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_denorm_kernel() { return std::make_unique<GemvDenormKernel>(); }

}  // namespace fp4cl
