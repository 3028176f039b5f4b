// The host reference quantizers: the FP4.md §8 worked example, each recipe step against a
// straightforward restatement of FP4.md §3/§4 written here (nearest-value searches on doubles,
// the MXFP4 exponent by search rather than by bits), dequantization, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bf16_test_data.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "support/errors.hpp"
#include "test_helpers.hpp"

namespace fp4cl {
namespace {

using test::bf16;
using test::error_of;

// E2M1 code by nearest-value search (ties to even), sign given, saturating; NaN gives 7.
std::uint8_t nearest_e2m1(double x, bool negative) {
  static const double values[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double a = std::fabs(x);
  if (std::isnan(a) || a >= 6) return static_cast<std::uint8_t>((negative ? 8 : 0) | 7);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - values[c]), db = std::fabs(a - values[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return static_cast<std::uint8_t>((negative ? 8 : 0) | best);
}


TEST(QuantizeReference, WorkedExampleOfTheSpec) {
  // FP4.md §8: [3.0, -1.296875, 0.1298828125, 0.125, 0 × 12], gs = 1.
  std::vector<std::uint16_t> x(16, 0);
  x[0] = bf16(3.0f);
  x[1] = bf16(-1.296875f);
  x[2] = bf16(0.1298828125f);
  x[3] = bf16(0.125f);
  ASSERT_EQ(bf16_to_float(x[1]), -1.296875f);  // the inputs are exact BF16 values
  ASSERT_EQ(bf16_to_float(x[2]), 0.1298828125f);
  const QuantizedRows q = quantize_nvfp4(x, 1, 16, 1.0f);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(q.scales[0], 0x30);  // sf = 0.5
  ASSERT_EQ(q.packed.size(), 8u);
  EXPECT_EQ(q.packed[0], 0xD7);  // codes 0x7, 0xD
  EXPECT_EQ(q.packed[1], 0x01);  // codes 0x1, 0x0 (0.25 is a tie → 0)
  for (std::size_t i = 2; i < 8; ++i) EXPECT_EQ(q.packed[i], 0x00);
  EXPECT_EQ(q.global_scale, 1.0f);
  const std::vector<float> w = dequantize(q);
  EXPECT_EQ(w[0], 3.0f);
  EXPECT_EQ(w[1], -1.5f);
  EXPECT_EQ(w[2], 0.25f);
  EXPECT_EQ(w[3], 0.0f);
}

// NVFP4 as FP4.md §3 states it, step by step in fp32, with the encoders replaced by searches.
void expect_nvfp4_recipe(const std::vector<std::uint16_t>& x, std::int64_t rows, std::int64_t cols, float gs) {
  const QuantizedRows q = quantize_nvfp4(x, rows, cols, gs);
  EXPECT_EQ(q.global_scale, 1.0f / gs);
  for (std::int64_t b = 0; b < rows * cols / 16; ++b) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) {
      const float v = std::fabs(bf16_to_float(x[static_cast<std::size_t>(b * 16 + i)]));
      if (v > amax) amax = v;
    }
    const float one_sixth = static_cast<float>(1.0 / 6.0);
    const float target = std::min(gs * (amax * one_sixth), 448.0f);
    // The nearest E4M3 value, ties to even, by search over the 127 finite magnitudes.
    int sf = 0;
    for (int c = 1; c < 0x7F; ++c) {
      const double d = std::fabs(target - e4m3_to_float(static_cast<std::uint8_t>(c)));
      const double ds = std::fabs(target - e4m3_to_float(static_cast<std::uint8_t>(sf)));
      if (d < ds || (d == ds && c % 2 == 0)) sf = c;
    }
    ASSERT_EQ(q.scales[static_cast<std::size_t>(b)], sf) << "block " << b << " amax " << amax << " gs " << gs;
    const float sff = e4m3_to_float(static_cast<std::uint8_t>(sf));
    const float mult = sff == 0 ? 0.0f : 1.0f / (sff * (1.0f / gs));
    for (int i = 0; i < 16; ++i) {
      const float v = bf16_to_float(x[static_cast<std::size_t>(b * 16 + i)]);
      const std::uint8_t code = fp4_code_at(q.packed.data(), b * 16 + i);
      ASSERT_EQ(code, nearest_e2m1(std::min(std::max(v * mult, -6.0f), 6.0f), std::signbit(v)))
          << "block " << b << " element " << i << " x " << v << " mult " << mult;
    }
  }
}

// MXFP4 as FP4.md §4 states it: E - 127 = the smallest e with 6·2^e >= amax (found by search on
// doubles), clamped to [-127, 127]; E = 0 for a zero block; elements x / 2^(E-127).
void expect_mxfp4_recipe(const std::vector<std::uint16_t>& x, std::int64_t rows, std::int64_t cols) {
  const QuantizedRows q = quantize_mxfp4(x, rows, cols);
  EXPECT_EQ(q.global_scale, 1.0f);
  for (std::int64_t b = 0; b < rows * cols / 32; ++b) {
    double amax = 0;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(static_cast<double>(bf16_to_float(x[static_cast<std::size_t>(b * 32 + i)]))));
    int e = 0;
    if (amax > 0) {
      e = -127;
      while (e < 127 && 6.0 * std::ldexp(1.0, e) < amax) ++e;
    }
    const int expected_byte = amax > 0 ? e + 127 : 0;
    ASSERT_EQ(q.scales[static_cast<std::size_t>(b)], expected_byte) << "block " << b << " amax " << amax;
    for (int i = 0; i < 32; ++i) {
      const float v = bf16_to_float(x[static_cast<std::size_t>(b * 32 + i)]);
      const double scaled = amax > 0 ? static_cast<double>(v) / std::ldexp(1.0, e) : 0.0;
      ASSERT_EQ(fp4_code_at(q.packed.data(), b * 32 + i), nearest_e2m1(scaled, std::signbit(v)))
          << "block " << b << " element " << i << " x " << v;
    }
  }
}

TEST(QuantizeReference, Nvfp4FollowsTheSpecRecipe) {
  for (const float gs : {1.0f, 0.37f, 2688.0f / 17.5f, 1000.0f, 1e-4f}) {
    SCOPED_TRACE(gs);
    expect_nvfp4_recipe(test::random_bf16(9, 256, 1), 9, 256, gs);
    expect_nvfp4_recipe(test::adversarial_bf16(9, 320, 16, 2), 9, 320, gs);
  }
}

TEST(QuantizeReference, Mxfp4FollowsTheSpecRecipe) {
  expect_mxfp4_recipe(test::random_bf16(9, 256, 3), 9, 256);
  expect_mxfp4_recipe(test::adversarial_bf16(9, 640, 32, 4), 9, 640);
}

TEST(QuantizeReference, Mxfp4ScaleBoundaries) {
  auto scale_of = [](float amax) {
    std::vector<std::uint16_t> x(32, 0);
    x[7] = bf16(amax);
    return quantize_mxfp4(x, 1, 32).scales[0];
  };
  EXPECT_EQ(scale_of(6.0f), 127);    // 6 = 6·2^0
  EXPECT_EQ(scale_of(6.0625f), 128);  // just above: next exponent
  EXPECT_EQ(scale_of(3.0f), 126);    // 6·2^-1
  EXPECT_EQ(scale_of(4.0f), 127);
  EXPECT_EQ(scale_of(bf16_to_float(0x7F7F)), 253);  // BF16 max 3.39e38 <= 6·2^126
  EXPECT_EQ(scale_of(bf16_to_float(0x0001)), 0);    // smallest subnormal: 2^-133 / 6 → clamp 2^-127
  EXPECT_EQ(scale_of(std::numeric_limits<float>::infinity()), 254);
  EXPECT_EQ(scale_of(0.0f), 0);
}

TEST(QuantizeReference, DequantizeIsCodeTimesScaleTimesGlobalScale) {
  const std::vector<std::uint16_t> x = test::adversarial_bf16(5, 96, 32, 9);
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const float gs = format == WeightFormat::nvfp4 ? 0.37f : 1.0f;
    const QuantizedRows q = quantize(format, x, 5, 96, gs);
    const std::vector<float> w = dequantize(q);
    ASSERT_EQ(w.size(), x.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::uint8_t sb = q.scales[i / static_cast<std::size_t>(q.block_size())];
      const double scale = format == WeightFormat::nvfp4 ? e4m3_to_float(sb) : std::ldexp(1.0, sb - 127);
      // The product in double is exact; rounding it once to float is what fp32 evaluation gives
      // (products of 2^128 and more overflow to Inf).
      const double exact = static_cast<double>(e2m1_to_float(fp4_code_at(q.packed.data(), static_cast<std::int64_t>(i)))) *
                           scale * static_cast<double>(q.global_scale);
      const float expected = std::fabs(exact) >= std::ldexp(1.0, 128)
                                 ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(exact > 0 ? 1 : -1))
                                 : static_cast<float>(exact);
      ASSERT_EQ(w[i], expected) << to_string(format) << " element " << i;
    }
  }
}

TEST(QuantizeReference, RoundTripErrorIsWithinHalfTheWidestE2M1Gap) {
  // Scaled by the block multiplier, no element lies beyond 6 (MXFP4) or 6 × (1 + 1/16) (NVFP4,
  // whose block scale is rounded to E4M3), so each element is off by at most 1 (half the gap
  // between 4 and 6) in scaled units: |x - w| <= scale × gs_d. NVFP4 blocks whose scale is an
  // E4M3 subnormal lose relative precision by design and are left out.
  const std::int64_t rows = 8, cols = 512;
  const std::vector<std::uint16_t> x = test::random_bf16(rows, cols, 21);
  float tensor_amax = 0;
  for (const std::uint16_t v : x) tensor_amax = std::max(tensor_amax, std::fabs(bf16_to_float(v)));
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const float gs = format == WeightFormat::nvfp4 ? 448.0f * 6.0f / tensor_amax : 1.0f;
    const QuantizedRows q = quantize(format, x, rows, cols, gs);
    const std::vector<float> w = dequantize(q);
    std::size_t checked = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::uint8_t sb = q.scales[i / static_cast<std::size_t>(q.block_size())];
      if (format == WeightFormat::nvfp4 && sb < 0x08) continue;
      const double scale = format == WeightFormat::nvfp4 ? e4m3_to_float(sb) : std::ldexp(1.0, sb - 127);
      const double bound = scale * static_cast<double>(q.global_scale) * (1 + 1e-6);
      ASSERT_LE(std::fabs(static_cast<double>(bf16_to_float(x[i])) - w[i]), bound) << to_string(format) << " " << i;
      ++checked;
    }
    EXPECT_GT(checked, w.size() / 2) << to_string(format);
  }
}

TEST(QuantizeReference, ErrorsNameTheArgument) {
  const std::vector<std::uint16_t> x(2 * 48, 0);
  EXPECT_NE(error_of([&] { quantize_nvfp4(std::vector<std::uint16_t>(40), 2, 20, 1.0f); }).find("cols (K) = 20"),
            std::string::npos);
  const std::string mx = error_of([&] { quantize_mxfp4(x, 2, 48); });
  EXPECT_NE(mx.find("cols (K) = 48"), std::string::npos) << mx;
  EXPECT_NE(mx.find("32"), std::string::npos) << mx;
  EXPECT_NE(error_of([&] { quantize_nvfp4(x, 3, 48, 1.0f); }).find("bf16"), std::string::npos);
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_NE(error_of([&] { quantize_nvfp4(x, 2, 48, bad); }).find("gs_quant"), std::string::npos) << bad;
  EXPECT_NE(error_of([&] { quantize(WeightFormat::mxfp4, std::vector<std::uint16_t>(64), 2, 32, 2.0f); }).find("gs_quant"),
            std::string::npos);
  QuantizedRows q = quantize_nvfp4(x, 2, 48, 1.0f);
  q.scales.pop_back();
  EXPECT_NE(error_of([&] { dequantize(q); }).find("scales"), std::string::npos);
  QuantizedRows mq = quantize_mxfp4(std::vector<std::uint16_t>(64), 2, 32);
  mq.global_scale = 2.0f;  // MXFP4 has no global scale
  EXPECT_NE(error_of([&] { dequantize(mq); }).find("global_scale"), std::string::npos);
}

TEST(QuantizeReference, EmptyMatricesAreFine) {
  const QuantizedRows q = quantize_nvfp4({}, 0, 64, 1.0f);
  EXPECT_TRUE(q.packed.empty());
  EXPECT_TRUE(q.scales.empty());
  EXPECT_TRUE(dequantize(q).empty());
}

}  // namespace
}  // namespace fp4cl
