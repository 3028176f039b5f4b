#include "prepare/fp4_words_layout.hpp"

#include <algorithm>

#include "support/check.hpp"

namespace fp4cl {

std::uint32_t fp4_words_pair_order(std::uint32_t word) {
  std::uint32_t out = 0;
  for (int p = 0; p < 4; ++p) {
    out |= ((word >> (8 * p)) & 15u) << (4 * p);             // element 2p -> nibble p
    out |= ((word >> (8 * p + 4)) & 15u) << (4 * p + 16);    // element 2p + 1 -> nibble p + 4
  }
  return out;
}

Fp4WordsLayout make_fp4_words_layout(const Fp4Weight& w, std::int64_t rows, Fp4WordsOrder order) {
  const std::int64_t block = block_size(w.format);
  if (w.k % kFp4WordChunk != 0 || w.k % block != 0)
    fail("words layout: k = {} is not a multiple of {}", w.k, std::max(kFp4WordChunk, block));
  Fp4WordsLayout layout;
  layout.info = fp4_lane_groups_info(w, rows);
  const std::int64_t words = w.k / 8;
  layout.codes.assign(static_cast<std::size_t>(layout.info.groups * words * rows), 0);
  fp4_lane_group_blocks(w, layout.info, rows, layout.scales,
                        [&](std::int64_t row, std::int64_t g, std::int64_t r, std::int64_t b, bool flip) {
    const std::uint8_t* src = w.packed.data() + row * (w.k / 2);
    const std::uint32_t sign = flip ? 0x88888888u : 0;
    for (std::int64_t wi = b * block / 8; wi < (b + 1) * block / 8; ++wi) {
      const std::uint8_t* p = src + 4 * wi;
      const std::uint32_t word = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                 static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
      layout.codes[static_cast<std::size_t>((g * words + wi) * rows + r)] =
          (order == Fp4WordsOrder::pairs ? fp4_words_pair_order(word) : word) ^ sign;
    }
  });
  return layout;
}

}  // namespace fp4cl
