// The MMA layout (host/prepare/fp4_mma_layout.hpp) against the fragment table of PTX's
// mma.m16n8k16 with 16-bit A (row-major): lane 4g + t holds a0 = (row g, k-slot 2t..2t+1),
// a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..), the lower k in the low half;
// k-slot s of the chunk's MMA j holds k = 16·(s % 8 / 2) + 4·j + 2·(s / 8) + s % 2 of the chunk.
#include <gtest/gtest.h>

#include <bitset>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "prepare/fp4_mma_layout.hpp"
#include "support/scoped_env.hpp"
#include "support/stacked_rows.hpp"

namespace fp4cl::test {
namespace {

// Where the PTX ISA's table puts element (row, k) of a 16×16 A tile: lane, register, half.
struct Fragment {
  int lane, reg, half;
};
Fragment ptx_a_fragment(int row, int k) {
  const int g = row % 8, t = (k % 8) / 2;
  return {4 * g + t, (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), k % 2};
}

TEST(MmaLayout, EveryElementSitsWhereItsFragmentRegisterReadsIt) {
  const std::int64_t K = 192;  // 3 chunks
  for (std::int64_t row = 0; row < 48; ++row) {
    for (std::int64_t k = 0; k < K; ++k) {
      const MmaPosition p = mma_position(row, k, K);
      // The MMA j and k-slot s of k: the inverse of the map above, found by search.
      int j = -1, s = -1;
      for (int jj = 0; jj < 4; ++jj)
        for (int ss = 0; ss < 16; ++ss)
          if (16 * (ss % 8 / 2) + 4 * jj + 2 * (ss / 8) + ss % 2 == k % 64) j = jj, s = ss;
      ASSERT_GE(j, 0);
      const Fragment f = ptx_a_fragment(static_cast<int>(row % 16), s);
      // words [row tile][chunk][lane][MMA of the chunk]
      const std::int64_t expect_word = (((row / 16) * (K / 64) + k / 64) * 32 + f.lane) * 4 + j;
      ASSERT_EQ(p.word, expect_word) << "row " << row << " k " << k;
      // the kernel takes register a_i's pair from "nibbles" i (low half) and 4 + i (high half)
      ASSERT_EQ(p.nibble, 4 * f.half + f.reg) << "row " << row << " k " << k;
    }
  }
}

// The eight codes of a word fill its 32 bits, each bit once, and each reads back as written.
TEST(MmaLayout, TheCodesOfAWordFillItsBitsOnce) {
  std::uint32_t all = 0;
  for (int nibble = 0; nibble < 8; ++nibble) {
    const std::uint32_t bits = mma_code_bits(0xFu, nibble);
    EXPECT_EQ(std::bitset<32>(bits).count(), 4u) << nibble;
    EXPECT_EQ(all & bits, 0u) << nibble;
    all |= bits;
    for (std::uint32_t code = 0; code < 16; ++code) {
      EXPECT_EQ(mma_code(mma_code_bits(code, nibble) | ~bits, nibble), code) << nibble;
      EXPECT_EQ(mma_code(mma_code_bits(code, nibble), nibble), code) << nibble;
    }
  }
  EXPECT_EQ(all, 0xFFFFFFFFu);
}

// Every code and scale lands where the kernels read it: MXFP4 as the checkpoint has them, NVFP4
// with the layout's scale codes and each block's scale sign or zero applied to its codes.
TEST(MmaLayout, CarriesEveryCodeAndScale) {
  const std::int64_t R = 32, K = 128;
  for (std::int64_t block : {16, 32}) {
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * K / 2)), scales(static_cast<std::size_t>(R * K / block));
    for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<std::uint8_t>(i * 37 + 11);
    for (std::size_t i = 0; i < scales.size(); ++i) {
      scales[i] = static_cast<std::uint8_t>(i * 13 + 5);
      if (block == 16 && (scales[i] & 0x7F) == 0x7F) scales[i] = 0;  // no NaN: a zero scale instead
    }
    const MmaLayout m = mma_layout(packed, scales, R, K, block);
    ASSERT_EQ(m.words.size(), static_cast<std::size_t>(R * K / 8));
    for (std::int64_t row = 0; row < R; ++row) {
      for (std::int64_t k = 0; k < K; ++k) {
        std::uint8_t byte = packed[static_cast<std::size_t>((row * K + k) / 2)];
        if (block == 16) byte = mma_nvfp4_codes(byte, scales[static_cast<std::size_t>(row * (K / 16) + k / 16)]);
        const unsigned code = k % 2 == 0 ? byte & 0xFu : byte >> 4u;
        const MmaPosition p = mma_position(row, k, K);
        ASSERT_EQ(mma_code(m.words[static_cast<std::size_t>(p.word)], p.nibble), code);
      }
      // Lane 4g + t of row tile rt, chunk c reads group g: bytes of row g (first half) and g + 8.
      const std::int64_t per_chunk = 64 / block, rt = row / 16, g = row % 8, upper = (row % 16) / 8;
      for (std::int64_t b = 0; b < K / block; ++b) {
        const std::int64_t c = b / per_chunk, j = b % per_chunk;
        const std::size_t at = static_cast<std::size_t>(((rt * (K / 64) + c) * 8 + g) * 2 * per_chunk +
                                                        upper * per_chunk + j);
        const std::uint8_t sb = scales[static_cast<std::size_t>(row * (K / block) + b)];
        ASSERT_EQ(m.scales[at], block == 16 ? mma_nvfp4_scale_code(sb) : sb) << "block " << block;
      }
    }
  }
}

// The kernel's NVFP4 scale decode (common/fp4_mma.cl, fp4_mma_scale_pair: code × 16 + (scale_exp +
// 118) << 7 in each BF16 half, scale_exp 119 for NVFP4) gives |s| × 2^119 for every E4M3 byte but
// NaN, by the spec's decode (e4m3_to_float): subnormal, normal, 448 and negative scales alike.
TEST(MmaLayout, Nvfp4ScaleCodesDecodeToEveryE4M3Magnitude) {
  const int scale_exp = 119;
  for (unsigned b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F || (b & 0x7F) == 0) continue;
    const std::uint32_t code = mma_nvfp4_scale_code(static_cast<std::uint8_t>(b));
    const std::uint32_t pair = (code | code << 16) * 16u + static_cast<std::uint32_t>(scale_exp + 118) * 0x00800080u;
    ASSERT_EQ(pair >> 16, pair & 0xFFFFu) << "byte " << b;  // no carry into the upper half
    float decoded = 0.0f;
    const std::uint32_t bits = pair << 16;
    std::memcpy(&decoded, &bits, 4);
    ASSERT_EQ(decoded, std::ldexp(std::fabs(e4m3_to_float(static_cast<std::uint8_t>(b))), scale_exp)) << "byte " << b;
  }
  EXPECT_EQ(mma_nvfp4_scale_code(0x00), 0);
  EXPECT_EQ(mma_nvfp4_scale_code(0x80), 0);
  EXPECT_THROW(mma_nvfp4_scale_code(0x7F), Error);
  EXPECT_THROW(mma_nvfp4_scale_code(0xFF), Error);
}

// Decoding the whole layout as the kernel does (codes through mma_code, scales through the
// layout's bytes) gives back every element e2m1 × scale of the checkpoint, where NVFP4 scales are
// negative, zero, subnormal or 448.
TEST(MmaLayout, DecodesToTheCheckpointsValuesWithNegativeAndZeroScales) {
  const std::int64_t R = 16, K = 256;
  for (std::int64_t block : {16, 32}) {
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * K / 2)), scales(static_cast<std::size_t>(R * K / block));
    for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<std::uint8_t>(i * 29 + 3);
    const std::uint8_t nv[] = {0x00, 0x80, 0x01, 0x85, 0x7E, 0xFE, 0x38, 0xB8, 0x07, 0x40};
    for (std::size_t i = 0; i < scales.size(); ++i)
      scales[i] = block == 16 ? nv[i % 10] : static_cast<std::uint8_t>(120 + i % 9);
    const MmaLayout m = mma_layout(packed, scales, R, K, block);
    const std::int64_t per_chunk = 64 / block;
    for (std::int64_t row = 0; row < R; ++row) {
      for (std::int64_t k = 0; k < K; ++k) {
        const std::uint8_t byte = packed[static_cast<std::size_t>((row * K + k) / 2)];
        const std::uint8_t sb = scales[static_cast<std::size_t>(row * (K / block) + k / block)];
        const float scale = block == 16 ? e4m3_to_float(sb) : e8m0_to_float(sb);
        const float expect = e2m1_to_float(static_cast<std::uint8_t>(k % 2 == 0 ? byte & 0xF : byte >> 4)) * scale;
        const MmaPosition p = mma_position(row, k, K);
        const std::uint32_t code = mma_code(m.words[static_cast<std::size_t>(p.word)], p.nibble);
        const std::int64_t b = k / block, c = b / per_chunk, j = b % per_chunk, g = row % 8, upper = row / 8;
        const std::uint8_t layout_scale =
            m.scales[static_cast<std::size_t>((c * 8 + g) * 2 * per_chunk + upper * per_chunk + j)];
        float layout_value = 0.0f;
        if (block == 16) {
          const std::uint32_t bits = (layout_scale * 16u + (119u + 118u) * 0x80u) << 16;
          std::memcpy(&layout_value, &bits, 4);
          layout_value = std::ldexp(layout_value, -119);
        } else {
          layout_value = e8m0_to_float(layout_scale);
        }
        ASSERT_EQ(e2m1_to_float(static_cast<std::uint8_t>(code)) * layout_value, expect)
            << "block " << block << " row " << row << " k " << k << " scale 0x" << std::hex << unsigned{sb};
      }
    }
  }
}

TEST(MmaLayout, RefusesNaNScalesNamingRowAndBlock) {
  std::vector<std::uint8_t> packed(16 * 64 / 2), scales(16 * 64 / 16, 0x38);
  scales[5 * 4 + 2] = 0xFF;
  try {
    mma_layout(packed, scales, 16, 64, 16);
    ADD_FAILURE() << "a NaN scale accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 5, block 2 is NaN (E4M3 byte 0xFF)"), std::string::npos) << e.what();
  }
}

// What the kernels rely on (common/fp4_mma.cl, mma_lane_scales): every element of a chunk that
// lane 4g + t holds lies in one block, NVFP4 block t and MXFP4 block t / 2 of the chunk, and its
// B fragments are the chunk's pairs 8t .. 8t + 7 in order (b[2j + i / 2] feeds a_i of MMA j).
TEST(MmaLayout, EachLaneHoldsOneBlockOfAChunkAndConsecutiveActivations) {
  const std::int64_t K = 128;
  for (std::int64_t row = 0; row < 32; ++row) {
    for (std::int64_t k = 0; k < K; ++k) {
      const MmaPosition p = mma_position(row, k, K);
      const std::int64_t lane = (p.word / 4) % 32, t = lane % 4, j = p.word % 4, kk = k % 64;
      ASSERT_EQ(kk / 16, t) << "row " << row << " k " << k;         // NVFP4 block t of the chunk
      ASSERT_EQ(kk / 32, t / 2) << "row " << row << " k " << k;     // MXFP4 block t / 2
      // Register a_i = nibbles i (h = 0) and 4 + i (h = 1); its B register is b[2j + (i >> 1)],
      // the chunk's pair 8t + 2j + (i >> 1), i.e. elements 16t + 4j + 2 (i >> 1) + h.
      const int i = p.nibble % 4, h = p.nibble / 4;
      ASSERT_EQ(kk, 16 * t + 4 * j + 2 * (i >> 1) + h) << "row " << row << " k " << k;
    }
  }
}

TEST(MmaLayout, RefusesShapesOffTheTiles) {
  const std::vector<std::uint8_t> packed(16 * 96 / 2), scales(16 * 96 / 16);
  try {
    mma_layout(packed, scales, 16, 96, 16);
    ADD_FAILURE() << "K = 96 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("K = 96 a multiple of 64"), std::string::npos) << e.what();
  }
  const std::vector<std::uint8_t> p64(16 * 64 / 2), s8(16 * 64 / 8);
  EXPECT_THROW(mma_layout(p64, s8, 16, 64, 8), Error);   // blocks of 8: neither NVFP4 nor MXFP4
  EXPECT_THROW(mma_layout(p64, s8, 8, 64, 16), Error);   // 8 rows: not a row tile
}

// Pseudo-random checkpoint bytes: any codes, and scales without NaN under NVFP4 (block 16).
void fill_layout_input(std::vector<std::uint8_t>& packed, std::vector<std::uint8_t>& scales, std::int64_t block,
                       std::uint32_t seed) {
  std::uint32_t x = seed;
  const auto next = [&x] { return x = x * 1664525u + 1013904223u, static_cast<std::uint8_t>(x >> 24); };
  for (auto& b : packed) b = next();
  for (auto& b : scales) {
    b = next();
    if (block == 16 && (b & 0x7F) == 0x7F) b = 0x38;
  }
}

// Rows of a stack read in place (FC1's gate or up half of each expert, SourceRows) give the
// layout of those rows copied out first, bit for bit, for both halves and both block sizes, where
// each expert's rows are whole row tiles (I = 48) and where a row tile spans two experts (I = 24).
TEST(MmaLayout, SourceRowsReadInPlaceMatchTheRowsCopiedOut) {
  const std::int64_t H = 128;
  for (const auto& [E, I] : {std::pair<std::int64_t, std::int64_t>{3, 48}, {2, 24}}) {
    for (std::int64_t block : {16, 32}) {
      std::vector<std::uint8_t> packed(static_cast<std::size_t>(E * 2 * I * H / 2)),
          scales(static_cast<std::size_t>(E * 2 * I * H / block));
      fill_layout_input(packed, scales, block, 7u + static_cast<std::uint32_t>(block));
      for (std::int64_t first : {std::int64_t{0}, I}) {
        const StackedRows half = copy_stacked_rows(packed, scales, E, 2 * I, first, I, H, block);
        const MmaLayout copied = mma_layout(half.packed, half.scales, E * I, H, block);
        const MmaLayout in_place = mma_layout(packed, scales, E * I, H, block, {I, 2 * I, first});
        EXPECT_EQ(in_place.words, copied.words) << "I " << I << " block " << block << " first " << first;
        EXPECT_EQ(in_place.scales, copied.scales) << "I " << I << " block " << block << " first " << first;
      }
    }
  }
}

TEST(MmaLayout, RefusesSourceRowsThatDoNotTileIt) {
  const std::vector<std::uint8_t> packed(64 * 64 / 2), scales(64 * 64 / 16);
  // Rows 16 .. 31 of matrices of 24 rows: past each matrix's end.
  try {
    mma_layout(packed, scales, 32, 64, 16, {16, 24, 16});
    ADD_FAILURE() << "source rows past the stride accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("source rows 16 .. 31 of every 24 do not tile"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mma_layout(packed, scales, 48, 64, 16, {32, 64, 0}), Error);  // 48 rows: not whole matrices
  EXPECT_THROW(mma_layout(packed, scales, 32, 64, 16, {16, 64, 0}), Error);  // a source of 128 rows, 64 given
}

// The layout's row tiles are built on several threads (FP4CL_HOST_THREADS) where there is enough
// of them: the same bits as one thread, and of a NaN scale in several threads' rows the error
// names the first, as one thread would.
TEST(MmaLayout, ThreadsGiveTheBitsOfOneThreadAndItsFirstError) {
  const std::int64_t R = 16 * 192, K = 2048;  // 3 MiB of codes: 3 ranges of 64 row tiles at 1 MiB each
  for (std::int64_t block : {16, 32}) {
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * K / 2)),
        scales(static_cast<std::size_t>(R * K / block));
    fill_layout_input(packed, scales, block, 99u);
    MmaLayout one, three;
    {
      const ScopedEnv env("FP4CL_HOST_THREADS", "1");
      one = mma_layout(packed, scales, R, K, block);
    }
    {
      const ScopedEnv env("FP4CL_HOST_THREADS", "3");
      three = mma_layout(packed, scales, R, K, block);
    }
    EXPECT_EQ(three.words, one.words) << "block " << block;
    EXPECT_EQ(three.scales, one.scales) << "block " << block;
  }
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * K / 2)), scales(static_cast<std::size_t>(R * K / 16));
  fill_layout_input(packed, scales, 16, 5u);
  scales[static_cast<std::size_t>(2500 * (K / 16) + 9)] = 0x7F;  // the third range's rows
  scales[static_cast<std::size_t>(1500 * (K / 16) + 3)] = 0xFF;  // the second's: the first NaN
  const ScopedEnv env("FP4CL_HOST_THREADS", "3");
  try {
    mma_layout(packed, scales, R, K, 16);
    ADD_FAILURE() << "a NaN scale accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1500, block 3 is NaN (E4M3 byte 0xFF)"), std::string::npos) << e.what();
  }
}

TEST(MmaLayout, RefusesHostThreadCountsOutOfRange) {
  const std::vector<std::uint8_t> packed(16 * 64 / 2), scales(16 * 64 / 16, 0x38);
  for (const char* bad : {"0", "many", "3x", "257", "-2"}) {
    const ScopedEnv env("FP4CL_HOST_THREADS", bad);
    try {
      mma_layout(packed, scales, 16, 64, 16);
      ADD_FAILURE() << "FP4CL_HOST_THREADS = " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FP4CL_HOST_THREADS = '" + std::string(bad) +
                                           "': expected a number of threads from 1 to 256"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4cl::test
