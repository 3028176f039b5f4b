// The "lanes" weight layout of the CPU GEMV (kernels/linear_gemv_lanes.cl): rows in groups of 8
// as vector lanes (fp4_lane_groups.hpp: the group order and the block scales, [ceil(n/8)][k/block][8]).
//
//   codes   [ceil(n/8)][k/16][64] bytes: per group and 16-element chunk c, four 16-byte loads
//           q = 0..3 of the elements e = 16c + 4q + {0, 1, 2, 3}, in one of two orders:
//             by_element (the float GEMV): byte p·8 + r holds row r's elements e0 + 2p (low
//               nibble) and e0 + 2p + 1 (high), so each half of a table lookup is one element of
//               the 8 rows;
//             by_quad (the integer GEMV): byte 4r + i holds element e0 + i of row r in its low
//               nibble and of row r + 4 in its high nibble (r = 0..3, i = 0..3), so the low
//               nibbles of a load are rows 0..3's four elements and the high nibbles rows 4..7's:
//               one 32-bit lane per row after a byte-table lookup, as a byte multiply-add wants
//               them (kernels/linear_gemv_int.cl).
//           The E2M1 codes are the checkpoint's (an NVFP4 block with a negative scale has its
//           codes' signs flipped and its scale made positive).
// Made on the host once, at load, then uploaded (upload_fp4_layout).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/fp4_lane_groups.hpp"

namespace fp4cl {

constexpr std::int64_t kFp4LaneRows = 8;    // rows per group (vector lanes)
constexpr std::int64_t kFp4LaneChunk = 16;  // elements per chunk (an NVFP4 block, half an MXFP4 one)

enum class Fp4LanesOrder { by_element, by_quad };

struct Fp4LanesLayout {
  Fp4LaneGroupsInfo info;
  std::vector<std::uint8_t> codes, scales;
};

Fp4LanesLayout make_fp4_lanes_layout(const Fp4Weight& weight, Fp4LanesOrder order);

}  // namespace fp4cl
