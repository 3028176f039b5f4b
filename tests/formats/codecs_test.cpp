// The scalar codecs: every code decodes to its spec value (FP4.md §1), and for every BF16 value
// (all 65536 patterns) the encoders agree with an independent nearest-value search on doubles
// with explicit tie-to-even (tie-up for E8M0), saturation, negative zero and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "fp4cl/formats.hpp"
#include "test_helpers.hpp"

namespace fp4cl {
namespace {

using test::bits_of;
using test::float_of_bits;
using test::same_float;


// The code among `magnitudes` (ascending, code i has value magnitudes[i]) nearest to a >= 0;
// a tie goes to the even code, or to the larger code with `ties_up`. Values past the largest
// magnitude (+Inf included) saturate to it.
std::uint32_t nearest_code(double a, const std::vector<double>& magnitudes, bool ties_up = false) {
  if (a >= magnitudes.back()) return static_cast<std::uint32_t>(magnitudes.size() - 1);
  std::uint32_t best = 0;
  for (std::uint32_t c = 1; c < magnitudes.size(); ++c) {
    const double d = std::fabs(a - magnitudes[c]), db = std::fabs(a - magnitudes[best]);
    if (d < db || (d == db && (ties_up || c % 2 == 0))) best = c;
  }
  return best;
}

const std::vector<double> kE2M1 = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

std::vector<double> e4m3_magnitudes() {  // codes 0x00 .. 0x7E from the spec's formula
  std::vector<double> v;
  for (int b = 0; b < 0x7F; ++b) {
    const int e = b >> 3, m = b & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}

std::uint8_t reference_e2m1(float x) {
  const std::uint32_t sign = std::signbit(x) ? 8 : 0;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 7);  // fp4cl's contract: NaN saturates
  return static_cast<std::uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(x)), kE2M1));
}

std::uint8_t reference_e4m3(float x, const std::vector<double>& magnitudes) {
  const std::uint32_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7F);
  return static_cast<std::uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(x)), magnitudes));
}

std::uint8_t reference_e8m0(float x) {
  if (std::isnan(x) || x < 0) return 0xFF;
  static const std::vector<double> powers = [] {
    std::vector<double> v;
    for (int b = 0; b <= 254; ++b) v.push_back(std::ldexp(1.0, b - 127));
    return v;
  }();
  return static_cast<std::uint8_t>(nearest_code(static_cast<double>(x), powers, /*ties_up=*/true));
}

TEST(Codecs, E2M1DecodesEveryCodeToTheSpecValue) {
  for (std::uint32_t c = 0; c < 16; ++c) {
    const double expected = (c & 8 ? -1 : 1) * kE2M1[c & 7];
    EXPECT_EQ(e2m1_to_float(static_cast<std::uint8_t>(c)), expected) << "code " << c;
  }
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8)));  // negative zero compares equal to 0
  EXPECT_EQ(e2m1_to_float(0x17), 6.0f);           // only the low 4 bits count
}

TEST(Codecs, E4M3DecodesEveryByteToTheSpecValue) {
  const auto magnitudes = e4m3_magnitudes();
  for (std::uint32_t b = 0; b < 256; ++b) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "byte " << b;
      continue;
    }
    const double expected = (b & 0x80 ? -1 : 1) * magnitudes[b & 0x7F];
    EXPECT_EQ(v, expected) << "byte " << b;
    EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << "byte " << b;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Codecs, E8M0DecodesEveryByteToAPowerOfTwo) {
  for (std::uint32_t b = 0; b < 255; ++b)
    EXPECT_EQ(static_cast<double>(e8m0_to_float(static_cast<std::uint8_t>(b))), std::ldexp(1.0, static_cast<int>(b) - 127))
        << "byte " << b;
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
}

TEST(Codecs, Bf16IsTheUpperHalfOfFloat) {
  for (std::uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(bits_of(bf16_to_float(static_cast<std::uint16_t>(b))), b << 16) << "bf16 " << b;
}

TEST(Codecs, EncodersMatchNearestValueSearchForEveryBf16) {
  const auto magnitudes = e4m3_magnitudes();
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float x = float_of_bits(b << 16);
    ASSERT_EQ(float_to_e2m1(x), reference_e2m1(x)) << "E2M1 of bf16 0x" << std::hex << b << " = " << x;
    ASSERT_EQ(float_to_e4m3(x), reference_e4m3(x, magnitudes)) << "E4M3 of bf16 0x" << std::hex << b << " = " << x;
  }
}

TEST(Codecs, E8M0EncoderMatchesNearestPowerForEveryBf16) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float x = float_of_bits(b << 16);
    ASSERT_EQ(float_to_e8m0(x), reference_e8m0(x)) << "E8M0 of bf16 0x" << std::hex << b << " = " << x;
  }
}

TEST(Codecs, EncodersMatchNearestValueSearchForRandomFloats) {
  // Float32 values, not only BF16 ones: mantissa bits below BF16 precision decide near ties.
  const auto magnitudes = e4m3_magnitudes();
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents around the formats' ranges (2^-12 .. 2^10), any sign and mantissa.
    const auto u = static_cast<std::uint32_t>((rng() & 0x807FFFFFu) | ((115u + rng() % 23u) << 23));
    const float x = float_of_bits(u);
    ASSERT_EQ(float_to_e2m1(x), reference_e2m1(x)) << "E2M1 of " << x;
    ASSERT_EQ(float_to_e4m3(x), reference_e4m3(x, magnitudes)) << "E4M3 of " << x;
    if (i % 16 == 0) {
      ASSERT_EQ(float_to_e8m0(std::fabs(x)), reference_e8m0(std::fabs(x))) << "E8M0 of " << x;
    }
  }
}

TEST(Codecs, E2M1RoundsTiesToEven) {
  // FP4.md §1 thresholds: the ties 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 go to the even code.
  const std::pair<float, std::uint8_t> cases[] = {{0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4},
                                                  {2.5f, 0x4},  {3.5f, 0x6},  {5.0f, 0x6},  {0.2500001f, 0x1},
                                                  {5.0000005f, 0x7}, {-2.5f, 0xC}, {-3.5f, 0xE}};
  for (const auto& [x, code] : cases) EXPECT_EQ(float_to_e2m1(x), code) << x;
}

TEST(Codecs, E2M1SaturatesAndKeepsTheSign) {
  EXPECT_EQ(float_to_e2m1(6.0f), 0x7);
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  EXPECT_EQ(float_to_e2m1(std::numeric_limits<float>::infinity()), 0x7);
  EXPECT_EQ(float_to_e2m1(-std::numeric_limits<float>::infinity()), 0xF);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);  // negative zero, as ModelOpt and compressed-tensors write it
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(float_to_e2m1(0.0f), 0x0);
  EXPECT_EQ(float_to_e2m1(std::numeric_limits<float>::quiet_NaN()) & 7, 0x7);
}

TEST(Codecs, E4M3SaturatesFiniteValuesAndNeverGivesNaN) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);  // a plain cast (PyTorch) gives NaN here
  EXPECT_EQ(float_to_e4m3(1e38f), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::max()), 0xFE);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float x = float_of_bits(b << 16);
    if (!std::isnan(x)) {
      ASSERT_NE(float_to_e4m3(x) & 0x7F, 0x7F) << "finite/Inf " << x << " encoded as NaN";
    }
  }
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);         // half the smallest subnormal: tie to even
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);         // 1.5 × 2^-9: tie to even (2)
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);                       // between 1 and 1.125: tie to even (1)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);                       // between 1.125 and 1.25: tie to even (1.25)
}

TEST(Codecs, E8M0RoundsTiesUpAndSaturates) {
  EXPECT_EQ(float_to_e8m0(1.0f), 127);
  EXPECT_EQ(float_to_e8m0(1.5f), 128);   // ties up, like ml_dtypes' float8_e8m0fnu
  EXPECT_EQ(float_to_e8m0(3.0f), 129);
  EXPECT_EQ(float_to_e8m0(1.4999999f), 127);
  EXPECT_EQ(float_to_e8m0(0.0f), 0);     // below 2^-127: the smallest value
  EXPECT_EQ(float_to_e8m0(-0.0f), 0);
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.5f, -127)), 1);
  EXPECT_EQ(float_to_e8m0(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(float_to_e8m0(std::numeric_limits<float>::infinity()), 254);
  EXPECT_EQ(float_to_e8m0(-1.0f), 0xFF);  // unsigned format
  EXPECT_EQ(float_to_e8m0(std::numeric_limits<float>::quiet_NaN()), 0xFF);
}

// Reference float → BF16: the nearer of the two BF16 neighbours, ties to the even one; overflow
// rounds as if the exponent were unbounded (to Inf past the midpoint above the largest finite).
std::uint16_t reference_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t lo = u >> 16, hi = lo + 1;  // same sign; |hi| > |lo|
  auto value = [](std::uint32_t b) {
    const double v = (b & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : static_cast<double>(std::fabs(float_of_bits(b << 16)));
    return v;
  };
  const double a = std::fabs(static_cast<double>(x)), dl = a - value(lo), dh = value(hi) - a;
  if (dl < dh || (dl == dh && lo % 2 == 0)) return static_cast<std::uint16_t>(lo);
  return static_cast<std::uint16_t>(hi);
}

TEST(Codecs, FloatToBf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  const std::uint32_t low_halves[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  for (std::uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7F80) == 0x7F80) continue;  // Inf and NaN below
    for (std::uint32_t low : low_halves) {
      const float x = float_of_bits((b << 16) | low);
      ASSERT_EQ(float_to_bf16(x), reference_bf16(x)) << std::hex << "float bits 0x" << bits_of(x);
    }
    const float r = float_of_bits((b << 16) | static_cast<std::uint32_t>(rng() & 0xFFFF));
    ASSERT_EQ(float_to_bf16(r), reference_bf16(r)) << std::hex << "float bits 0x" << bits_of(r);
  }
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest BF16
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(float_of_bits(0x7F800001)))));  // low-payload NaN stays NaN
  EXPECT_TRUE(same_float(bf16_to_float(float_to_bf16(-0.0f)), -0.0f));
}

}  // namespace
}  // namespace fp4cl
