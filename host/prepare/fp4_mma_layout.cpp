#include "prepare/fp4_mma_layout.hpp"

#include "support/check.hpp"

namespace fp4cl {

MmaPosition mma_position(std::int64_t row, std::int64_t k, std::int64_t K) {
  const std::int64_t rt = row / 16, r = row % 16, c = k / 64, kk = k % 64;
  const std::int64_t j = kk / 16, kt = kk % 16;  // k16 tile of the chunk, k within it
  const std::int64_t g = r % 8, t = (kt % 8) / 2, h = kt % 2;
  const std::int64_t i = (r / 8) | ((kt / 8) << 1);
  const std::int64_t lane = 4 * g + t;
  return {((rt * (K / 64) + c) * 32 + lane) * 4 + j, static_cast<int>(4 * h + i)};
}

MmaLayout mma_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales, std::int64_t R,
                     std::int64_t K, std::int64_t block) {
  if (R % 16 != 0 || K % 64 != 0)
    fail("the MMA layout needs rows = {} to be a multiple of 16 and K = {} a multiple of 64", R, K);
  if (block != 16 && block != 32) fail("the MMA layout needs FP4 blocks of 16 or 32 elements, not {}", block);
  if (packed.size() != static_cast<std::size_t>(R * K / 2) || scales.size() != static_cast<std::size_t>(R * K / block))
    fail("the MMA layout of [{}, {}]: {} code bytes and {} scale bytes given, {} and {} expected", R, K, packed.size(),
         scales.size(), R * K / 2, R * K / block);
  MmaLayout out;
  out.words.assign(static_cast<std::size_t>(R * K / 8), 0u);
  const std::int64_t chunks = K / 64, per_group = 64 / block, blocks = K / block;
  out.scales.assign(static_cast<std::size_t>(R / 16 * chunks * 8 * 2 * per_group), 0u);
  for (std::int64_t row = 0; row < R; ++row) {
    const std::uint8_t* bytes = &packed[static_cast<std::size_t>(row * K / 2)];
    for (std::int64_t k = 0; k < K; ++k) {
      const std::uint32_t code = (k % 2 == 0) ? (bytes[k / 2] & 0xFu) : (bytes[k / 2] >> 4);
      const MmaPosition p = mma_position(row, k, K);
      out.words[static_cast<std::size_t>(p.word)] |= code << (4 * p.nibble);
    }
    const std::int64_t rt = row / 16, g = row % 8, half = (row % 16) / 8;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t c = b / per_group, j = b % per_group;
      // byte 4·half + j of the group (NVFP4, 4 blocks a chunk), 2·half + j (MXFP4, 2 blocks a chunk)
      out.scales[static_cast<std::size_t>(((rt * chunks + c) * 8 + g) * 2 * per_group + half * per_group + j)] =
          scales[static_cast<std::size_t>(row * blocks + b)];
    }
  }
  return out;
}

}  // namespace fp4cl
