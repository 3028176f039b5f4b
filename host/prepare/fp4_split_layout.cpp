#include "prepare/fp4_split_layout.hpp"

#include <algorithm>
#include <cstdlib>

#include "fp4cl/formats.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "support/check.hpp"
#include "support/parallel.hpp"

namespace fp4cl {

int split_lanes(std::int64_t k) {
  if (k % 32 != 0) return 0;
  int lanes = 1;
  while (lanes < 32 && k % (32 * lanes * 2) == 0) lanes *= 2;
  return lanes;
}

SplitLayout split_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales,
                         std::int64_t E, std::int64_t N, std::int64_t K, std::int64_t block, int lanes,
                         const SourceRows& source) {
  const std::int64_t L = lanes > 0 ? lanes : split_lanes(K);
  if (L < 1 || K % (32 * L) != 0) fail("the split layout needs K = {} to be a multiple of 32·{}", K, L < 1 ? 1 : L);
  if ((source.mapped() && source.rows != N) || !source.fits(E * N))
    fail("the split layout of [{}, {}, {}]: source rows {} .. {} of every {} do not tile its rows", E, N, K,
         source.first, source.first + source.rows - 1, source.stride);
  const std::int64_t src_rows = source.source_rows(E * N);
  if (packed.size() != static_cast<std::size_t>(src_rows * K / 2) ||
      scales.size() != static_cast<std::size_t>(src_rows * K / block))
    fail("the split layout of [{}, {}, {}]: {} code bytes and {} scale bytes given, {} and {} expected", E, N, K,
         packed.size(), scales.size(), src_rows * K / 2, src_rows * K / block);
  const std::int64_t steps = K / (32 * L), G = std::max<std::int64_t>(1, 4 * L / block), blocks = K / block;
  SplitLayout out;
  out.words.assign(static_cast<std::size_t>(E * N * K / 8), 0u);
  out.scales.assign(static_cast<std::size_t>(E * N * steps * G * 8), 0u);
  // Rows are independent: ranges of them on threads (parallel_ranges).
  const auto rows = [&](std::int64_t row_begin, std::int64_t row_end) {
    for (std::int64_t row = row_begin; row < row_end; ++row) {
      const std::int64_t src = source(row);
      const std::uint8_t* bytes = &packed[static_cast<std::size_t>(src * K / 2)];
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
            sc[(s * G + g) * 8 + q] = scales[static_cast<std::size_t>(src * blocks + blk)];
          }
        }
      }
    }
  };
  parallel_ranges(E * N, K / 2, rows);
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

Fp4SplitWeight make_fp4_split_weight(const Fp4Weight& w, int max_lanes, int e2m1_exp) {
  const std::int64_t block = block_size(w.format);
  if (w.k % block != 0) fail("split layout: k = {} is not a multiple of the block size {}", w.k, block);
  Fp4SplitWeight out;
  out.n = w.n;
  out.k = w.k;
  out.kpad = (w.k + 31) / 32 * 32;
  out.lanes = std::max(1, std::min(max_lanes, split_lanes(out.kpad)));
  out.e2m1_exp = e2m1_exp;
  const std::int64_t blocks = w.k / block, pad_blocks = out.kpad / block;
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(w.n * out.kpad / 2), 0);
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(w.n * pad_blocks), 0);
  for (std::int64_t r = 0; r < w.n; ++r) {
    std::copy_n(w.packed.begin() + r * w.k / 2, w.k / 2, packed.begin() + r * out.kpad / 2);
    std::copy_n(w.scales.begin() + r * blocks, blocks, scales.begin() + r * pad_blocks);
  }
  if (w.format == WeightFormat::nvfp4) {
    out.scale_exp = e2m1_exp == -126 ? 119 : 0;  // E4M3 scales lie in [2^-9, 448]: both ends stay normal
  } else {
    const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);  // checks the nonzero blocks' range
    const auto hi = static_cast<unsigned>(offsets.scale_shift + 127);
    unsigned lo = hi;
    for (std::int64_t r = 0; r < w.n; ++r) {
      for (std::int64_t b = 0; b < pad_blocks; ++b) {
        const std::uint8_t* codes = &packed[static_cast<std::size_t>((r * out.kpad + b * block) / 2)];
        const bool zero = std::all_of(codes, codes + block / 2, [](std::uint8_t c) { return (c & 0x77) == 0; });
        std::uint8_t& sb = scales[static_cast<std::size_t>(r * pad_blocks + b)];
        if (zero) sb = static_cast<std::uint8_t>(hi);
        lo = std::min<unsigned>(lo, sb);
      }
    }
    out.scale_exp = mxfp4_decode_scale_exp(lo, hi, e2m1_exp);
    if (static_cast<int>(lo) + out.scale_exp < 1)
      fail("MXFP4 weight [{}, {}]: block scales from 2^{} to 2^{} are too wide for the split kernels' fp32 decode",
           w.n, w.k, static_cast<int>(lo) - 127, static_cast<int>(hi) - 127);
  }
  out.layout = split_layout(packed, scales, 1, w.n, out.kpad, block, out.lanes);
  return out;
}

}  // namespace fp4cl
