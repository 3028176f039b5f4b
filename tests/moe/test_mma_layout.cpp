// The MMA layout (host/prepare/fp4_mma_layout.hpp) against the fragment table of PTX's
// mma.m16n8k16 with 16-bit A (row-major): lane 4g + t holds a0 = (row g, k-slot 2t..2t+1),
// a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..), the lower k in the low half;
// k-slot s of the chunk's MMA j holds k = 16·(s % 8 / 2) + 4·j + 2·(s / 8) + s % 2 of the chunk.
#include <gtest/gtest.h>

#include <bitset>
#include <cstdint>
#include <vector>

#include "fp4cl/error.hpp"
#include "prepare/fp4_mma_layout.hpp"

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

TEST(MmaLayout, CarriesEveryCodeAndScale) {
  const std::int64_t R = 32, K = 128;
  for (std::int64_t block : {16, 32}) {
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(R * K / 2)), scales(static_cast<std::size_t>(R * K / block));
    for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<std::uint8_t>(i * 37 + 11);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(i * 13 + 5);
    const MmaLayout m = mma_layout(packed, scales, R, K, block);
    ASSERT_EQ(m.words.size(), static_cast<std::size_t>(R * K / 8));
    for (std::int64_t row = 0; row < R; ++row) {
      for (std::int64_t k = 0; k < K; ++k) {
        const std::uint8_t byte = packed[static_cast<std::size_t>((row * K + k) / 2)];
        const unsigned code = k % 2 == 0 ? byte & 0xFu : byte >> 4;
        const MmaPosition p = mma_position(row, k, K);
        ASSERT_EQ(mma_code(m.words[static_cast<std::size_t>(p.word)], p.nibble), code);
      }
      // Lane 4g + t of row tile rt, chunk c reads group g: bytes of row g (first half) and g + 8.
      const std::int64_t per_chunk = 64 / block, rt = row / 16, g = row % 8, upper = (row % 16) / 8;
      for (std::int64_t b = 0; b < K / block; ++b) {
        const std::int64_t c = b / per_chunk, j = b % per_chunk;
        const std::size_t at = static_cast<std::size_t>(((rt * (K / 64) + c) * 8 + g) * 2 * per_chunk +
                                                        upper * per_chunk + j);
        ASSERT_EQ(m.scales[at], scales[static_cast<std::size_t>(row * (K / block) + b)]) << "block " << block;
      }
    }
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

}  // namespace
}  // namespace fp4cl::test
