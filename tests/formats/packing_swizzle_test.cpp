// Nibble packing (FP4.md §2) and the 128×4 swizzled scale layout (§7).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"

namespace fp4cl {
namespace {

TEST(Packing, EvenElementGoesToTheLowNibble) {
  EXPECT_EQ(pack_fp4({0x7, 0xD, 0x1, 0x0}), (std::vector<std::uint8_t>{0xD7, 0x01}));
  EXPECT_EQ(unpack_fp4({0xD7, 0x01}), (std::vector<std::uint8_t>{0x7, 0xD, 0x1, 0x0}));
  const std::vector<std::uint8_t> packed = {0x21, 0x43};
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(fp4_code_at(packed.data(), i), i + 1);
}

TEST(Packing, RoundTripsEveryCodePair) {
  std::vector<std::uint8_t> codes;
  for (int lo = 0; lo < 16; ++lo)
    for (int hi = 0; hi < 16; ++hi) {
      codes.push_back(static_cast<std::uint8_t>(lo));
      codes.push_back(static_cast<std::uint8_t>(hi));
    }
  const auto packed = pack_fp4(codes);
  ASSERT_EQ(packed.size(), 256u);
  // Pair i is (lo = i / 16, hi = i % 16): the byte holds lo in bits 0-3 and hi in bits 4-7.
  for (std::size_t i = 0; i < packed.size(); ++i) EXPECT_EQ(packed[i], (i / 16) | ((i % 16) << 4)) << i;
  EXPECT_EQ(unpack_fp4(packed), codes);
}

TEST(Packing, RejectsOddCountsAndWideCodes) {
  EXPECT_THROW(pack_fp4({1, 2, 3}), Error);
  EXPECT_THROW(pack_fp4({1, 16}), Error);
}

TEST(Swizzle, WorkedExampleOfTheSpec) {
  // FP4.md §7: Kp = 8, (m = 33, k = 5) → 533, and back.
  EXPECT_EQ(swizzled_scale_index(33, 5, 8), 533);
  const ScalePosition p = swizzled_scale_position(533, 8);
  EXPECT_EQ(p.row, 33);
  EXPECT_EQ(p.col, 5);
}

TEST(Swizzle, IndexIsABijectionOntoThePaddedTilesAndInvertsExactly) {
  for (const std::int64_t kp : {4, 8, 12, 180}) {
    const std::int64_t mp = 256;
    std::vector<int> hits(static_cast<std::size_t>(mp * kp), 0);
    for (std::int64_t m = 0; m < mp; ++m) {
      for (std::int64_t k = 0; k < kp; ++k) {
        const std::int64_t b = swizzled_scale_index(m, k, kp);
        ASSERT_GE(b, 0);
        ASSERT_LT(b, mp * kp);
        ++hits[static_cast<std::size_t>(b)];
        // A 128-row × 4-column tile is one contiguous 512-byte chunk, tiles in row-major order.
        EXPECT_EQ(b / 512, (m / 128) * (kp / 4) + k / 4);
        const ScalePosition p = swizzled_scale_position(b, kp);
        ASSERT_EQ(p.row, m);
        ASSERT_EQ(p.col, k);
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

TEST(Swizzle, RoundTripsAndZeroesThePadding) {
  std::mt19937 rng(3);
  for (const std::int64_t rows : {1, 7, 127, 128, 129, 333}) {
    for (const std::int64_t cols : {1, 3, 4, 5, 180}) {
      std::vector<std::uint8_t> linear(static_cast<std::size_t>(rows * cols));
      for (auto& v : linear) v = static_cast<std::uint8_t>(1 + rng() % 255);  // never 0
      const auto swizzled = swizzle_scales(linear, rows, cols);
      const std::int64_t mp = swizzled_padded_rows(rows), kp = swizzled_padded_cols(cols);
      ASSERT_EQ(static_cast<std::int64_t>(swizzled.size()), mp * kp);
      ASSERT_EQ(static_cast<std::int64_t>(swizzled.size()), scale_bytes(ScaleLayout::swizzled, rows, cols));
      for (std::int64_t b = 0; b < mp * kp; ++b) {
        const ScalePosition p = swizzled_scale_position(b, kp);
        const bool padding = p.row >= rows || p.col >= cols;
        const std::uint8_t expected = padding ? 0 : linear[static_cast<std::size_t>(p.row * cols + p.col)];
        ASSERT_EQ(swizzled[static_cast<std::size_t>(b)], expected) << rows << "x" << cols << " byte " << b;
      }
      EXPECT_EQ(unswizzle_scales(swizzled, rows, cols), linear);
    }
  }
}

TEST(Swizzle, ExpertsArePaddedSeparatelyAndConcatenated) {
  const std::int64_t experts = 3, rows = 130, cols = 6;
  std::mt19937 rng(5);
  std::vector<std::uint8_t> linear(static_cast<std::size_t>(experts * rows * cols));
  for (auto& v : linear) v = static_cast<std::uint8_t>(rng());
  const auto stacked = swizzle_expert_scales(linear, experts, rows, cols);
  const std::int64_t per_expert = swizzled_padded_rows(rows) * swizzled_padded_cols(cols);
  ASSERT_EQ(static_cast<std::int64_t>(stacked.size()), experts * per_expert);
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::vector<std::uint8_t> one(linear.begin() + e * rows * cols, linear.begin() + (e + 1) * rows * cols);
    const std::vector<std::uint8_t> expected = swizzle_scales(one, rows, cols);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), stacked.begin() + e * per_expert)) << "expert " << e;
  }
  EXPECT_EQ(unswizzle_expert_scales(stacked, experts, rows, cols), linear);
}

TEST(Swizzle, RejectsMismatchedSizes) {
  EXPECT_THROW(swizzle_scales(std::vector<std::uint8_t>(10), 3, 4), Error);
  EXPECT_THROW(unswizzle_scales(std::vector<std::uint8_t>(10), 3, 4), Error);
  EXPECT_THROW(swizzled_scale_index(0, 0, 6), Error);  // padded columns must be a multiple of 4
  EXPECT_THROW(swizzled_scale_index(0, 8, 8), Error);
}

}  // namespace
}  // namespace fp4cl
