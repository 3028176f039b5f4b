// The shared codecs and recipe steps compiled for the OpenCL device agree with the host bit for
// bit: every BF16 pattern, random float32 values near the formats' ties, every code, and the
// NVFP4/MXFP4 scale and multiplier for every BF16 block maximum, scalar and 8-lane (this also
// checks that the exact division build option takes effect).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "common/quant_recipe.cl"
#include "device_codecs.hpp"
#include "fp4cl/formats.hpp"
#include "test_helpers.hpp"

namespace fp4cl {
namespace {

using test::bits_of;
using test::float_of_bits;
using test::same_float;


class DeviceCodecs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ctx_.emplace(Context::create());
    codecs_.emplace(*ctx_);
  }
  static void TearDownTestSuite() {
    codecs_.reset();
    ctx_.reset();
  }
  static std::optional<Context> ctx_;
  static std::optional<test::DeviceCodecs> codecs_;
};
std::optional<Context> DeviceCodecs::ctx_;
std::optional<test::DeviceCodecs> DeviceCodecs::codecs_;

// Every BF16 pattern, then random float32 values with exponents around the formats' ranges.
std::vector<float> test_values() {
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 65536; ++b) x.push_back(float_of_bits(b << 16));
  std::mt19937 rng(17);
  while (x.size() < 65536 + 65536)
    x.push_back(float_of_bits(static_cast<std::uint32_t>((rng() & 0x807FFFFFu) | ((100u + rng() % 40u) << 23))));
  return x;
}

TEST_F(DeviceCodecs, ScalarEncodersMatchTheHost) {
  const std::vector<float> x = test_values();
  const auto d = codecs_->encode_scalars(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(d.e2m1[i], float_to_e2m1(x[i])) << "E2M1 of 0x" << std::hex << bits_of(x[i]);
    ASSERT_EQ(d.e4m3[i], float_to_e4m3(x[i])) << "E4M3 of 0x" << std::hex << bits_of(x[i]);
    ASSERT_EQ(d.e8m0[i], float_to_e8m0(x[i])) << "E8M0 of 0x" << std::hex << bits_of(x[i]);
    ASSERT_EQ(d.bf16[i], float_to_bf16(x[i])) << "BF16 of 0x" << std::hex << bits_of(x[i]);
  }
}

TEST_F(DeviceCodecs, VectorEncodersMatchTheHost) {
  const std::vector<float> x = test_values();
  const auto d = codecs_->encode_vectors(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(d.e2m1[i], float_to_e2m1(x[i])) << "E2M1 of 0x" << std::hex << bits_of(x[i]);
    ASSERT_EQ(d.bf16[i], float_to_bf16(x[i])) << "BF16 of 0x" << std::hex << bits_of(x[i]);
  }
}

TEST_F(DeviceCodecs, DecodersMatchTheHost) {
  const auto d = codecs_->decode_all();
  for (std::uint32_t c = 0; c < 16; ++c)
    EXPECT_TRUE(same_float(d.e2m1[c], e2m1_to_float(static_cast<std::uint8_t>(c)))) << "E2M1 code " << c;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const auto byte = static_cast<std::uint8_t>(b);
    for (std::uint32_t j = 0; j < 8; ++j) {
      const auto code = static_cast<std::uint8_t>(j % 2 ? b >> 4 : b & 15);
      ASSERT_TRUE(same_float(d.e2m1x8[b * 8 + j], e2m1_to_float(code))) << "byte " << b << " lane " << j;
    }
    EXPECT_TRUE(same_float(d.e4m3[b], e4m3_to_float(byte))) << "E4M3 byte " << b;
    EXPECT_TRUE(same_float(d.e8m0[b], e8m0_to_float(byte))) << "E8M0 byte " << b;
  }
}

// Every block maximum (+0 .. +Inf as BF16), fp32 subnormals and random fp32 values.
std::vector<float> block_maxima() {
  std::vector<float> amax;
  for (std::uint32_t b = 0; b < 0x7F81; ++b) amax.push_back(float_of_bits(b << 16));  // +0 .. +Inf
  for (std::uint32_t u = 1; u < (1u << 23); u = u * 3 + 1) amax.push_back(float_of_bits(u));  // fp32 subnormals
  std::mt19937 rng(23);
  while (amax.size() % 8 != 0 || amax.size() < 0x7F81 + 60000)  // random fp32 maxima
    amax.push_back(float_of_bits(static_cast<std::uint32_t>(rng() % 0x7F800001u)));
  return amax;
}

void expect_recipe_steps_match(test::DeviceCodecs& codecs) {
  const std::vector<float> amax = block_maxima();
  for (const bool vector : {false, true}) {
    for (const float gs : {1.0f, 0.37f, 2688.0f / 17.5f, 1000.0f, 1e-30f, 1e30f}) {
      const auto d = codecs.recipe_steps(amax, gs, vector);
      for (std::size_t i = 0; i < amax.size(); ++i) {
        const std::uint32_t sf = ::nvfp4_scale_byte(amax[i], gs), e = ::mxfp4_scale_byte(amax[i]);
        ASSERT_EQ(d.nv_scale[i], sf) << "amax " << amax[i] << " gs " << gs << " vector " << vector;
        ASSERT_TRUE(same_float(d.nv_mult[i], ::nvfp4_multiplier(sf, gs)))
            << "amax " << amax[i] << " gs " << gs << " vector " << vector;
        ASSERT_EQ(d.mx_scale[i], e) << "amax " << amax[i] << " vector " << vector;
        ASSERT_TRUE(same_float(d.mx_mult[i], ::mxfp4_multiplier(e))) << "amax " << amax[i] << " vector " << vector;
      }
    }
  }
}

TEST_F(DeviceCodecs, RecipeStepsMatchTheHostForEveryBlockMaximum) { expect_recipe_steps_match(*codecs_); }

TEST_F(DeviceCodecs, RecipeStepsMatchWithDivisionThroughFp64) {
  // The fallback add_exact_division picks on devices without correctly rounded fp32 division.
  if (!ctx_->info().has_fp64) GTEST_SKIP() << ctx_->info().name << " has no fp64";
  test::DeviceCodecs fp64_codecs(*ctx_, BuildOptions().define("FP4CL_DIV_VIA_FP64"));
  expect_recipe_steps_match(fp64_codecs);
}

}  // namespace
}  // namespace fp4cl
