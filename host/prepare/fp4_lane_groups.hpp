// What the CPU GEMV weight layouts "lanes" (fp4_lanes_layout.hpp) and "words"
// (fp4_words_layout.hpp) share: rows in groups of R, the R rows of a group side by side so that
// one vector lane serves one row, every group's codes contiguous (a work-item streams its group's
// codes front to back), and the block scales
//
//   scales  [ceil(n/R)][k/block][R] bytes: the block scales of the group's R rows side by side
//           (E4M3 magnitudes or E8M0 exponents). Rows past n hold zero codes and zero scales.
//
// An NVFP4 block with a negative scale has its codes' signs flipped and its scale made positive.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"
#include "prepare/fp4_device_layout.hpp"

namespace fp4cl {

struct Fp4LaneGroupsInfo {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t n = 0, k = 0, groups = 0;
  int scale_shift = 0, exp_bias = 0;  // MXFP4 scales relative to the largest (fp4_row_layout.hpp)
};

using DeviceFp4LaneGroups = DeviceFp4Layout<Fp4LaneGroupsInfo>;

// The info of weight w in groups of `rows` rows. Throws as fp4_scale_offsets does.
Fp4LaneGroupsInfo fp4_lane_groups_info(const Fp4Weight& w, std::int64_t rows);

// Fills `scales` ([groups][k/block][rows] bytes, zero past n) and, for every block b of every row
// (in group g, lane r), calls codes(row, g, r, b, flip) to place the block's codes, their signs
// flipped where `flip` is true.
template <typename PlaceCodes>
void fp4_lane_group_blocks(const Fp4Weight& w, const Fp4LaneGroupsInfo& info, std::int64_t rows,
                           std::vector<std::uint8_t>& scales, PlaceCodes&& codes) {
  const std::int64_t blocks = w.k / block_size(w.format);
  scales.assign(static_cast<std::size_t>(info.groups * blocks * rows), 0);
  for (std::int64_t row = 0; row < w.n; ++row) {
    const std::int64_t g = row / rows, r = row % rows;
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::uint8_t scale = w.scales[static_cast<std::size_t>(row * blocks + b)];
      // NVFP4: a negative scale's sign moves into its block's codes (e2m1 × -s = -e2m1 × s).
      bool flip = false;
      if (w.format == WeightFormat::nvfp4 && (scale & 0x80) != 0) {
        scale &= 0x7F;
        flip = true;
      }
      scales[static_cast<std::size_t>((g * blocks + b) * rows + r)] = scale;
      codes(row, g, r, b, flip);
    }
  }
}

}  // namespace fp4cl
