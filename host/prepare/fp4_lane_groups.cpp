#include "prepare/fp4_lane_groups.hpp"

#include "prepare/fp4_row_layout.hpp"

namespace fp4cl {

Fp4LaneGroupsInfo fp4_lane_groups_info(const Fp4Weight& w, std::int64_t rows) {
  Fp4LaneGroupsInfo info;
  info.format = w.format;
  info.n = w.n;
  info.k = w.k;
  info.groups = (w.n + rows - 1) / rows;
  const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);
  info.scale_shift = offsets.scale_shift;
  info.exp_bias = offsets.exp_bias;
  return info;
}

}  // namespace fp4cl
