// The "lanes" weight layouts of the CPU GEMVs (kernels/linear_gemv_lanes.cl, linear_gemv_int.cl):
// rows in groups as vector lanes (fp4_lane_groups.hpp: the group order and the block scales,
// [groups][k/block][rows per group]), in one of two orders:
//
//   by_element (the float GEMV, groups of 8 rows)
//     codes [ceil(n/8)][k/16][64] bytes: per group and 16-element chunk c, four 16-byte loads
//           q = 0..3 of the elements e0 = 16c + 4q .. e0 + 3: byte p·8 + r holds row r's
//           elements e0 + 2p (low nibble) and e0 + 2p + 1 (high), so each half of a table lookup
//           is one element of the 8 rows.
//   by_quad (the integer GEMV, groups of 16 rows)
//     codes [ceil(n/16)][k/16][128] bytes: per group and chunk c, four 32-byte loads q = 0..3:
//           byte 4r + i (r = 0..7, i = 0..3) holds element e0 + i of row r in its low nibble and
//           of row r + 8 in its high nibble. So the low nibbles of a load are rows 0..7's four
//           elements and the high nibbles rows 8..15's, each one 32-bit lane per row after a
//           byte-table lookup, as a byte multiply-add by one broadcast of the 4 activations wants
//           them: a load costs two masks, one shift and two lookups for 64 weights (groups of 8
//           rows took a 16-byte broadcast, a variable shift and a mask for 32;
//           kernels/linear_gemv_int.cl has the measurement).
//
// The E2M1 codes are the checkpoint's (an NVFP4 block with a negative scale has its codes' signs
// flipped and its scale made positive). Made on the host once, at load, then uploaded
// (upload_fp4_layout).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/fp4_lane_groups.hpp"

namespace fp4cl {

constexpr std::int64_t kFp4LaneChunk = 16;  // elements per chunk (an NVFP4 block, half an MXFP4 one)

enum class Fp4LanesOrder { by_element, by_quad };

// Rows per group: 8 by_element, 16 by_quad.
constexpr std::int64_t fp4_lanes_rows(Fp4LanesOrder order) { return order == Fp4LanesOrder::by_quad ? 16 : 8; }

struct Fp4LanesLayout {
  Fp4LaneGroupsInfo info;
  std::vector<std::uint8_t> codes, scales;
};

Fp4LanesLayout make_fp4_lanes_layout(const Fp4Weight& weight, Fp4LanesOrder order);

}  // namespace fp4cl
