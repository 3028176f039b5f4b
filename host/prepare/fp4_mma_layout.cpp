#include "prepare/fp4_mma_layout.hpp"

#include <algorithm>
#include <cstring>

#include "prepare/fp4_row_layout.hpp"    // fp4_scale_offsets
#include "prepare/fp4_split_layout.hpp"  // mxfp4_decode_scale_exp
#include "support/check.hpp"
#include "support/parallel.hpp"

namespace fp4cl {

std::uint32_t mma_code_bits(std::uint32_t code, int nibble) {
  const int i = nibble % 4, base = 16 * (nibble / 4);
  return (code & 7u) << (base + kMmaMagnitudeBit[i]) | ((code >> 3) & 1u) << (base + kMmaSignBit[i]);
}

std::uint32_t mma_code(std::uint32_t word, int nibble) {
  const int i = nibble % 4, base = 16 * (nibble / 4);
  return (word >> (base + kMmaMagnitudeBit[i]) & 7u) | (word >> (base + kMmaSignBit[i]) & 1u) << 3;
}

std::uint8_t mma_nvfp4_scale_code(std::uint8_t e4m3) {
  const unsigned exponent = (e4m3 >> 3) & 0xFu, mantissa = e4m3 & 7u;
  if (exponent == 15 && mantissa == 7) fail("an NVFP4 block scale is NaN (E4M3 byte 0x{:02X})", e4m3);
  if (exponent > 0) return static_cast<std::uint8_t>((exponent + 2) << 3 | mantissa);  // e = exponent - 7
  if (mantissa == 0) return 0;
  // Subnormal: mantissa/8 × 2^-6 = 1.f × 2^(p - 9) with p the leading one's position (0..2).
  const unsigned p = mantissa >= 4 ? 2 : mantissa >= 2 ? 1 : 0;
  return static_cast<std::uint8_t>(p << 3 | ((mantissa << (3 - p)) & 7u));
}

std::uint8_t mma_nvfp4_codes(std::uint8_t packed, std::uint8_t e4m3) {
  if ((e4m3 & 0x7Fu) == 0) return static_cast<std::uint8_t>(packed & 0x88u);  // zero scale: ±0 codes
  return e4m3 & 0x80u ? static_cast<std::uint8_t>(packed ^ 0x88u) : packed;
}

MmaPosition mma_position(std::int64_t row, std::int64_t k, std::int64_t K) {
  const std::int64_t rt = row / 16, r = row % 16, c = k / 64, kk = k % 64;
  const std::int64_t t = kk / 16, kb = kk % 16;  // the lane's 16 elements of the chunk, k within them
  const std::int64_t g = r % 8, j = kb / 4, h = kb % 2;
  const std::int64_t i = (r / 8) | (((kb % 4) / 2) << 1);
  const std::int64_t lane = 4 * g + t;
  return {((rt * (K / 64) + c) * 32 + lane) * 4 + j, static_cast<int>(4 * h + i)};
}

namespace {

// A checkpoint byte's two codes (low nibble first) as the bits they take in a word of the layout,
// for each register a_i (pair_bits[i][byte]: nibbles i and 4 + i), and an NVFP4 scale byte's
// layout code (kNaNScaleCode for NaN). Built once from mma_code_bits and mma_nvfp4_scale_code.
struct MmaLayoutTables {
  std::uint32_t pair_bits[4][256];
  std::uint8_t nvfp4_scale[256];
};
constexpr std::uint8_t kNaNScaleCode = 0xFF;  // no layout code is this large ((15 + 2) << 3 | 7 = 143)

const MmaLayoutTables& mma_layout_tables() {
  static const MmaLayoutTables tables = [] {
    MmaLayoutTables t{};
    for (int i = 0; i < 4; ++i)
      for (std::uint32_t b = 0; b < 256; ++b)
        t.pair_bits[i][b] = mma_code_bits(b & 0xFu, i) | mma_code_bits(b >> 4, 4 + i);
    for (unsigned b = 0; b < 256; ++b)
      t.nvfp4_scale[b] = (b & 0x7Fu) == 0x7Fu ? kNaNScaleCode : mma_nvfp4_scale_code(static_cast<std::uint8_t>(b));
    return t;
  }();
  return tables;
}

// The 8 bytes (16 codes of one block of 16, or half a block of 32) at `p`, little-endian, with
// mma_nvfp4_codes's rule for NVFP4 scale `sb` applied to every byte at once.
std::uint64_t load_codes(const std::uint8_t* p, bool nvfp4, std::uint8_t sb) {
  std::uint64_t x = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(&x, p, sizeof x);
#else
  for (int b = 7; b >= 0; --b) x = x << 8 | p[b];
#endif
  if (!nvfp4) return x;
  constexpr std::uint64_t signs = 0x8888888888888888ull;
  if ((sb & 0x7Fu) == 0) return x & signs;  // zero scale: ±0 codes
  return sb & 0x80u ? x ^ signs : x;
}

}  // namespace

MmaLayout mma_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales, std::int64_t R,
                     std::int64_t K, std::int64_t block, const SourceRows& source) {
  if (R % 16 != 0 || K % 64 != 0)
    fail("the MMA layout needs rows = {} to be a multiple of 16 and K = {} a multiple of 64", R, K);
  if (block != 16 && block != 32) fail("the MMA layout needs FP4 blocks of 16 or 32 elements, not {}", block);
  if (!source.fits(R))
    fail("the MMA layout of [{}, {}]: source rows {} .. {} of every {} do not tile its rows", R, K, source.first,
         source.first + source.rows - 1, source.stride);
  const std::int64_t src_rows = source.source_rows(R);
  if (packed.size() != static_cast<std::size_t>(src_rows * K / 2) ||
      scales.size() != static_cast<std::size_t>(src_rows * K / block))
    fail("the MMA layout of [{}, {}]: {} code bytes and {} scale bytes given, {} and {} expected (source rows: {})", R,
         K, packed.size(), scales.size(), src_rows * K / 2, src_rows * K / block, src_rows);
  const MmaLayoutTables& tables = mma_layout_tables();
  const bool nvfp4 = block == 16;
  MmaLayout out;
  out.words.resize(static_cast<std::size_t>(R * K / 8));
  const std::int64_t chunks = K / 64, per_chunk = 64 / block, blocks = K / block;
  out.scales.resize(static_cast<std::size_t>(R / 16 * chunks * 8 * 2 * per_chunk));
  // In output order: lane 4g + t of row tile rt, chunk c holds the 16 codes k = 64c + 16t .. + 15
  // of rows 16rt + g and 16rt + g + 8 (source rows r0, r1: 8 checkpoint bytes each, one NVFP4
  // block). Word j takes register a_i's two codes (k, k + 1 with k = 64c + 16t + 4j + 2(i >> 1)):
  // one checkpoint byte, byte 2j + (i >> 1) of row r0 (i even) or r1 (i odd), with its NVFP4 block
  // scale's sign or zero applied (mma_nvfp4_codes). mma_position states the same map element by
  // element. Row tiles are independent: ranges of them run on host_threads() threads (at least
  // 1 MiB of codes each), each stopping at its first NaN scale, the lowest range's error thrown.
  const std::uint8_t* codes = packed.data();
  const std::uint8_t* sbytes = scales.data();
  const auto row_tiles = [&](std::int64_t rt_begin, std::int64_t rt_end) {
    std::uint32_t* word = out.words.data() + rt_begin * chunks * 128;
    std::uint8_t* scale = out.scales.data() + rt_begin * chunks * 16 * per_chunk;
    for (std::int64_t rt = rt_begin; rt < rt_end; ++rt) {
      for (std::int64_t c = 0; c < chunks; ++c) {
        for (std::int64_t g = 0; g < 8; ++g) {
          const std::int64_t r0 = source(16 * rt + g), r1 = source(16 * rt + g + 8);
          for (std::int64_t t = 0; t < 4; ++t) {
            const std::int64_t k = 64 * c + 16 * t, b = k / block;
            const std::uint64_t x0 = load_codes(codes + (r0 * K + k) / 2, nvfp4, sbytes[r0 * blocks + b]);
            const std::uint64_t x1 = load_codes(codes + (r1 * K + k) / 2, nvfp4, sbytes[r1 * blocks + b]);
            for (int j = 0; j < 4; ++j) {
              const int lo = 16 * j, hi = lo + 8;
              *word++ = tables.pair_bits[0][x0 >> lo & 0xFFu] | tables.pair_bits[2][x0 >> hi & 0xFFu] |
                        tables.pair_bits[1][x1 >> lo & 0xFFu] | tables.pair_bits[3][x1 >> hi & 0xFFu];
            }
          }
        }
        // byte upper·per_chunk + j of group g: row 16·rt + g + 8·upper, block per_chunk·c + j
        for (std::int64_t g = 0; g < 8; ++g) {
          for (std::int64_t upper = 0; upper < 2; ++upper) {
            for (std::int64_t j = 0; j < per_chunk; ++j) {
              const std::int64_t from = source(16 * rt + g + 8 * upper), b = per_chunk * c + j;
              const std::uint8_t sb = sbytes[from * blocks + b];
              if (!nvfp4) {
                *scale++ = sb;
                continue;
              }
              const std::uint8_t code = tables.nvfp4_scale[sb];
              if (code == kNaNScaleCode)
                fail("the MMA layout of [{}, {}]: the NVFP4 block scale of row {}, block {} is NaN (E4M3 byte "
                     "0x{:02X})",
                     R, K, from, b, sb);
              *scale++ = code;
            }
          }
        }
      }
    }
  };
  parallel_ranges(R / 16, 8 * K, row_tiles);  // a row tile: 16 rows of K/2 code bytes
  return out;
}

Fp4MmaWeight make_fp4_mma_weight(const Fp4Weight& w) {
  if (w.n % 16 != 0 || w.k % 64 != 0)
    fail("FP4 weight [{}, {}]: the MMA layout needs N (out_features) to be a multiple of 16 and K (in_features) a "
         "multiple of 64",
         w.n, w.k);
  const std::int64_t block = block_size(w.format), blocks = w.k / block;
  Fp4MmaWeight out;
  out.n = w.n;
  out.k = w.k;
  if (w.format == WeightFormat::nvfp4) {
    out.scale_exp = 119;
    out.layout = mma_layout(w.packed, w.scales, w.n, w.k, block);
    return out;
  }
  const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);  // checks the nonzero blocks' range
  const auto hi = static_cast<unsigned>(offsets.scale_shift + 127);
  std::vector<std::uint8_t> scales = w.scales;
  unsigned lo = hi;
  for (std::int64_t r = 0; r < w.n; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint8_t* codes = &w.packed[static_cast<std::size_t>((r * w.k + b * block) / 2)];
      const bool zero = std::all_of(codes, codes + block / 2, [](std::uint8_t c) { return (c & 0x77) == 0; });
      std::uint8_t& sb = scales[static_cast<std::size_t>(r * blocks + b)];
      if (zero) sb = static_cast<std::uint8_t>(hi);
      lo = std::min<unsigned>(lo, sb);
    }
  }
  out.scale_exp = mxfp4_decode_scale_exp(lo, hi, -126);
  if (static_cast<int>(lo) + out.scale_exp < 1)
    fail("MXFP4 weight [{}, {}]: block scales from 2^{} to 2^{} are too wide for the MMA kernels' BF16 decode", w.n,
         w.k, static_cast<int>(lo) - 127, static_cast<int>(hi) - 127);
  out.layout = mma_layout(w.packed, scales, w.n, w.k, block);
  return out;
}

}  // namespace fp4cl
