#include "prepare/fp4_lanes_layout.hpp"

#include "support/check.hpp"

namespace fp4cl {

Fp4LanesLayout make_fp4_lanes_layout(const Fp4Weight& w, Fp4LanesOrder order) {
  const std::int64_t block = block_size(w.format);
  if (w.k % kFp4LaneChunk != 0) fail("lanes layout: k = {} is not a multiple of {}", w.k, kFp4LaneChunk);
  Fp4LanesLayout layout;
  const std::int64_t rows = fp4_lanes_rows(order);
  const std::int64_t chunk_bytes = rows * kFp4LaneChunk / 2, load_bytes = chunk_bytes / 4;
  layout.info = fp4_lane_groups_info(w, rows);
  const std::int64_t chunks = w.k / kFp4LaneChunk;
  layout.codes.assign(static_cast<std::size_t>(layout.info.groups * chunks * chunk_bytes), 0);
  fp4_lane_group_blocks(w, layout.info, rows, layout.scales,
                        [&](std::int64_t row, std::int64_t g, std::int64_t r, std::int64_t b, bool flip) {
    const std::uint8_t* src = w.packed.data() + row * (w.k / 2);
    const std::uint8_t sign = flip ? 0x88 : 0;
    for (std::int64_t e = b * block; e < (b + 1) * block; e += 4) {  // 4 elements: one byte pair per row
      const std::uint8_t b01 = static_cast<std::uint8_t>(src[e / 2] ^ sign);      // elements e, e + 1
      const std::uint8_t b23 = static_cast<std::uint8_t>(src[e / 2 + 1] ^ sign);  // elements e + 2, e + 3
      const std::int64_t c = e / kFp4LaneChunk, q = (e % kFp4LaneChunk) / 4;
      std::uint8_t* load = layout.codes.data() + (g * chunks + c) * chunk_bytes + q * load_bytes;
      if (order == Fp4LanesOrder::by_element) {
        load[r] = b01;
        load[8 + r] = b23;
      } else {
        // Row r's four codes go to the low nibbles of bytes 4r .. 4r + 3 (rows 0..7) or the high
        // nibbles of bytes 4(r - 8) .. 4(r - 8) + 3 (rows 8..15).
        const std::uint8_t codes[4] = {static_cast<std::uint8_t>(b01 & 0x0F), static_cast<std::uint8_t>(b01 >> 4),
                                       static_cast<std::uint8_t>(b23 & 0x0F), static_cast<std::uint8_t>(b23 >> 4)};
        const int shift = r < 8 ? 0 : 4;
        for (int i = 0; i < 4; ++i) load[4 * (r % 8) + i] |= static_cast<std::uint8_t>(codes[i] << shift);
      }
    }
  });
  return layout;
}

}  // namespace fp4cl
