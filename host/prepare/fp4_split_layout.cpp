#include "prepare/fp4_split_layout.hpp"

#include <algorithm>
#include <cstdlib>

#include "support/check.hpp"

namespace fp4cl {

int split_lanes(std::int64_t k) {
  if (k % 32 != 0) return 0;
  int lanes = 1;
  while (lanes < 32 && k % (32 * lanes * 2) == 0) lanes *= 2;
  return lanes;
}

SplitLayout split_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales,
                         std::int64_t E, std::int64_t N, std::int64_t K, std::int64_t block, int lanes) {
  const std::int64_t L = lanes > 0 ? lanes : split_lanes(K);
  if (L < 1 || K % (32 * L) != 0) fail("the split layout needs K = {} to be a multiple of 32·{}", K, L < 1 ? 1 : L);
  const std::int64_t steps = K / (32 * L), G = std::max<std::int64_t>(1, 4 * L / block), blocks = K / block;
  SplitLayout out;
  out.words.assign(static_cast<std::size_t>(E * N * K / 8), 0u);
  out.scales.assign(static_cast<std::size_t>(E * N * steps * G * 8), 0u);
  for (std::int64_t row = 0; row < E * N; ++row) {
    const std::uint8_t* bytes = &packed[static_cast<std::size_t>(row * K / 2)];
    const auto nibble = [&](std::int64_t k) -> std::uint32_t {
      const std::uint8_t b = bytes[k / 2];
      return (k % 2 == 0) ? (b & 0xFu) : (b >> 4);
    };
    std::uint32_t* words = &out.words[static_cast<std::size_t>(row * K / 8)];
    std::uint8_t* sc = &out.scales[static_cast<std::size_t>(row * steps * G * 8)];
    for (std::int64_t s = 0; s < steps; ++s) {
      for (std::int64_t l = 0; l < L; ++l) {
        for (std::int64_t i = 0; i < 4; ++i) {
          std::uint32_t w = 0;
          for (std::int64_t j = 0; j < 8; ++j) {
            const std::int64_t q = 2 * i + j / 4, c = j % 4;
            w |= nibble(s * 32 * L + 4 * L * q + 4 * l + c) << (4 * j);
          }
          words[(s * L + l) * 4 + i] = w;
        }
      }
      for (std::int64_t g = 0; g < G; ++g) {
        for (std::int64_t q = 0; q < 8; ++q) {
          const std::int64_t blk = (s * 32 * L + 4 * L * q + g * block) / block;
          sc[(s * G + g) * 8 + q] = scales[static_cast<std::size_t>(row * blocks + blk)];
        }
      }
    }
  }
  return out;
}

int mxfp4_decode_scale_exp(unsigned lo, unsigned hi, int e2m1_exp) {
  (void)lo;
  const int max_e = static_cast<int>(hi);
  return std::min({-e2m1_exp, 254 - max_e, 252 - e2m1_exp - max_e});
}

bool mxfp4_decode_scale_exp_fits(unsigned lo, int scale_exp, int e2m1_exp) {
  return static_cast<int>(lo) + scale_exp >= 1 && std::abs(scale_exp + e2m1_exp) <= 32;
}

}  // namespace fp4cl
