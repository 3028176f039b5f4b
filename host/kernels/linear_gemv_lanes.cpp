// Strategy "gemv_lanes": kernels/linear_gemv_lanes.cl, 8 weight rows per work-item as vector lanes
// (decode on CPUs). Its weights are the "lanes" layout (prepare/fp4_lanes_layout.hpp); the
// activations come from the same pre-pass as the rows kernels'. The rest is
// linear_lane_groups_kernel.hpp's.
#include <fmt/format.h>

#include "kernels/linear_lane_groups_kernel.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "prepare/fp4_lanes_layout.hpp"

namespace fp4cl {

namespace {

class GemvLanesKernel final : public LaneGroupsGemvKernel {
 public:
  GemvLanesKernel() : LaneGroupsGemvKernel("gemv_lanes", "LANES") {}

 protected:
  Verdict can_take(const LinearConfig& config) const override {
    if (config.k % kFp4LaneChunk != 0)
      return Verdict::no(fmt::format("k = {} is not a multiple of {}", config.k, kFp4LaneChunk));
    return Verdict::yes();
  }

  std::shared_ptr<const DeviceFp4LaneGroups> take_weights(const Context& ctx, const Fp4Weight& weight,
                                                          WeightLayouts& layouts) const override {
    return layouts.get_or_make<DeviceFp4LaneGroups>(
        "fp4_lanes8", [&] { return upload_fp4_layout(ctx, make_fp4_lanes_layout(weight, Fp4LanesOrder::by_element)); });
  }
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_lanes_kernel() { return std::make_unique<GemvLanesKernel>(); }

}  // namespace fp4cl
