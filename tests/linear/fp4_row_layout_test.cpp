// The "rows" weight layout made at load (host/prepare/fp4_row_layout.cpp): the code remap and row
// padding, negative NVFP4 scales folded into codes, and MXFP4's exponent offset. (The 128×4 scale
// swizzle it uses is formats.hpp's swizzle_scales, tested in tests/formats.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/quant_recipe.cl"
#include "linear/linear_test_data.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "reference/linear_reference.hpp"

namespace fp4cl {
namespace {

// The value the kernels decode for element j of row r of a layout (fp4_dot.cl's decode: stored
// magnitudes 0 and 1 swapped, scales magnitudes, MXFP4 relative to E_max), times 2^scale_shift.
double layout_value(const Fp4RowLayout& l, std::int64_t r, std::int64_t j) {
  const Fp4RowLayoutInfo& in = l.info;
  const std::uint8_t byte = l.codes[static_cast<std::size_t>(r * (in.kpad / 2) + j / 2)];
  const unsigned stored = j % 2 == 0 ? (byte & 15u) : (byte >> 4);
  const unsigned mag = stored & 7u;
  const unsigned code = (stored & 8u) | (mag == 0 ? 1u : mag == 1 ? 0u : mag);
  const std::int64_t block = block_size(in.format);
  const std::uint32_t kp = in.scale_kp;
  const std::uint8_t sb = l.scales[swizzled_scale_offset(static_cast<std::uint32_t>(r),
                                                         static_cast<std::uint32_t>(j / block), kp)];
  double scale;
  if (in.format == WeightFormat::nvfp4) {
    EXPECT_EQ(sb & 0x80, 0) << "a negative scale left in the layout";
    scale = e4m3_decode(sb);
  } else {
    scale = std::ldexp(1.0, std::max(sb + in.exp_bias, 1) - 127) * std::ldexp(1.0, in.scale_shift);
  }
  return static_cast<double>(e2m1_decode(code)) * scale;
}

void expect_layout_decodes_to_weight(const Fp4Weight& w) {
  const Fp4RowLayout l = make_fp4_row_layout(w);
  EXPECT_EQ(l.info.kpad % 64, 0);
  EXPECT_EQ(l.codes.size(), static_cast<std::size_t>(w.n * l.info.kpad / 2));
  for (std::int64_t r = 0; r < w.n; ++r) {
    for (std::int64_t j = 0; j < l.info.kpad; ++j) {
      const double got = layout_value(l, r, j);
      const double gs = w.format == WeightFormat::nvfp4 ? static_cast<double>(w.global_scale) : 1.0;
      const double expected = j < w.k ? reference::weight_value(w, r, j) / gs : 0.0;
      ASSERT_EQ(got, expected) << to_string(w.format) << " row " << r << " element " << j;
    }
  }
}

TEST(Fp4RowLayout, DecodesToTheCheckpointWeights) {
  expect_layout_decodes_to_weight(test::random_weight(WeightFormat::nvfp4, 131, 208, 1));  // negative scales too
  expect_layout_decodes_to_weight(test::random_weight(WeightFormat::mxfp4, 131, 224, 2));
}

TEST(Fp4RowLayout, Mxfp4ExponentOffset) {
  Fp4Weight w = test::random_weight(WeightFormat::mxfp4, 3, 64, 4);
  w.scales = {120, 140, 121, 122, 123, 90};
  for (auto& b : w.packed) b = 0x21;  // every block nonzero
  const Fp4RowLayout l = make_fp4_row_layout(w);
  EXPECT_EQ(l.info.scale_shift, 140 - 127);
  EXPECT_EQ(l.info.exp_bias, 127 - 140);
  // Blocks with only zero codes do not count.
  for (int i = 16; i < 32; ++i) w.packed[static_cast<std::size_t>(i)] = 0x08;  // row 0, block 1: ±0
  EXPECT_EQ(make_fp4_row_layout(w).info.scale_shift, 123 - 127);
  expect_layout_decodes_to_weight(w);
}

}  // namespace
}  // namespace fp4cl
