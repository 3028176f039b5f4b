// Quantizing one weight: NVFP4 equals the project's reference quantizer, the MXFP4 weight scale
// follows compressed-tensors' rule, global scales, edge cases and errors.
#include "checkpoint/weight_quantizer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/portable_random.hpp"
#include "checkpoint_write/checkpoint_write_test_util.hpp"
#include "fp4cl/error.hpp"

namespace fp4cl::detail {
namespace {

// Random BF16 weights with rows scaled over 2^-8..2^4 and a zero row: many block-scale exponents.
std::vector<std::uint16_t> weights_bf16(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  PortableRandom r(seed);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    const double scale = std::ldexp(1.0, static_cast<int>(i % 13) - 8);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double x = i == 3 ? 0.0 : scale * r.normal();
      w[static_cast<std::size_t>(i * cols + j)] = float_to_bf16(static_cast<float>(x));
    }
  }
  return w;
}

std::vector<float> to_floats(const std::vector<std::uint16_t>& bf16) {
  std::vector<float> f;
  for (const std::uint16_t b : bf16) f.push_back(bf16_to_float(b));
  return f;
}

TEST(WeightQuantizer, Nvfp4OfBf16WeightsEqualsTheReferenceQuantizer) {
  const std::int64_t rows = 40, cols = 96;
  const std::vector<std::uint16_t> w = weights_bf16(rows, cols, 1);
  const std::vector<float> f = to_floats(w);
  const float gs = nvfp4_global_scale(tensor_amax(f), "w");
  const QuantizedRows mine = quantize_weight(WeightFormat::nvfp4, f, rows, cols, gs, "w");
  const QuantizedRows ref = quantize_nvfp4(w, rows, cols, gs);
  EXPECT_EQ(mine.packed, ref.packed);
  EXPECT_EQ(mine.scales, ref.scales);
  EXPECT_EQ(mine.global_scale, ref.global_scale);
  EXPECT_EQ(mine.global_scale, 1.0f / gs);
  EXPECT_EQ(test::expect_within_fp4_error("nvfp4", f, mine, mine.global_scale), 0);
}

TEST(WeightQuantizer, Nvfp4GlobalScaleIsTheQuantDirection) {
  EXPECT_EQ(nvfp4_global_scale(6.0f, "w"), 448.0f);
  EXPECT_EQ(nvfp4_global_scale(2688.0f, "w"), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(0.37f, "w"), 2688.0f / 0.37f);
  EXPECT_EQ(nvfp4_global_scale(0.0f, "w"), 1.0f);  // all-zero tensor: any scale quantizes it to zeros
  try {
    nvfp4_global_scale(1e-38f, "model.x.weight");
    ADD_FAILURE() << "expected an overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.x.weight"), std::string::npos) << e.what();
  }
}

// compressed-tensors' rule restated with frexp: amax = f·2^e, f in [0.5, 1); the power of two is
// 2^(e-1) when the significand 2f < 1.75, else 2^e; E = 127 + log2(power) - 2, at least 0.
int ct_rule(float amax) {
  if (amax == 0.0f) return 0;
  int e = 0;
  const float f = std::frexp(amax, &e);
  const int log2_power = 2.0f * f < 1.75f ? e - 1 : e;
  return std::max(0, 127 + log2_power - 2);
}

TEST(WeightQuantizer, Mxfp4WeightScaleFollowsCompressedTensors) {
  // Worked values of the rule: 6 = 1.5·2^2 → 2^2 → E-127 = 0; 7 = 1.75·2^2 → 2^3 → 1;
  // 1 → -2; 0.4375 = 1.75·2^-2 → 2^-1 → -3.
  EXPECT_EQ(mxfp4_weight_scale_byte(6.0f), 127);
  EXPECT_EQ(mxfp4_weight_scale_byte(7.0f), 128);
  EXPECT_EQ(mxfp4_weight_scale_byte(std::nextafter(7.0f, 0.0f)), 127);
  EXPECT_EQ(mxfp4_weight_scale_byte(1.0f), 125);
  EXPECT_EQ(mxfp4_weight_scale_byte(0.4375f), 124);
  EXPECT_EQ(mxfp4_weight_scale_byte(0.0f), 0);
  EXPECT_EQ(mxfp4_weight_scale_byte(1e-40f), 0);  // subnormal: clamped
  EXPECT_EQ(mxfp4_weight_scale_byte(std::ldexp(1.0f, -125)), 0);
  EXPECT_EQ(mxfp4_weight_scale_byte(std::ldexp(1.0f, -124)), 1);
  PortableRandom r(2);
  for (int i = 0; i < 200000; ++i) {
    const float amax =
        static_cast<float>(std::ldexp(0.5 + 0.5 * r.uniform(), static_cast<int>(r.next() % 240) - 120));
    ASSERT_EQ(mxfp4_weight_scale_byte(amax), ct_rule(amax)) << "amax = " << amax;
    // The largest element scales below 7 and at least to 3.5 (rounds to 4).
    const double t = amax / e8m0_to_float(mxfp4_weight_scale_byte(amax));
    ASSERT_LT(t, 7.0) << amax;
    ASSERT_GE(t, 3.5) << amax;
  }
}

TEST(WeightQuantizer, Mxfp4QuantizesWithinFp4Error) {
  const std::int64_t rows = 40, cols = 128;
  const std::vector<float> f = to_floats(weights_bf16(rows, cols, 3));
  const QuantizedRows q = quantize_weight(WeightFormat::mxfp4, f, rows, cols, 1.0f, "w");
  EXPECT_EQ(q.global_scale, 1.0f);
  EXPECT_EQ(q.scales.size(), static_cast<std::size_t>(rows * cols / 32));
  for (std::int64_t b = 0; b < rows * cols / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(f[static_cast<std::size_t>(b * 32 + i)]));
    ASSERT_EQ(q.scales[static_cast<std::size_t>(b)], mxfp4_weight_scale_byte(amax));
  }
  EXPECT_EQ(test::expect_within_fp4_error("mxfp4", f, q, 1.0f), 0);
}

TEST(WeightQuantizer, ZeroBlocksAndZeroTensors) {
  const std::vector<float> zeros(64, 0.0f);
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const QuantizedRows q = quantize_weight(format, zeros, 2, 32, 1.0f, "z");
    for (const std::uint8_t b : q.packed) EXPECT_EQ(b, 0);
    for (const std::uint8_t s : q.scales) EXPECT_EQ(s, 0);
  }
}

TEST(WeightQuantizer, Errors) {
  const std::vector<float> v(2 * 48, 1.0f);
  try {
    quantize_weight(WeightFormat::mxfp4, v, 2, 48, 1.0f, "model.layers.0.mlp.down_proj.weight");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("48"), std::string::npos) << m;
    EXPECT_NE(m.find("32"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(quantize_weight(WeightFormat::nvfp4, v, 2, 48, 1.0f, "w"));

  SafetensorsWriter w;
  w.add("f16.weight", Dtype::f16, {2, 16}, std::vector<std::uint8_t>(64, 0));
  w.add("vec.weight", std::vector<std::int64_t>{32}, std::vector<float>(32, 1.0f));
  std::vector<float> with_nan(32, 1.0f);
  with_nan[5] = std::nanf("");
  w.add("nan.weight", std::vector<std::int64_t>{2, 16}, with_nan);
  const SafetensorsFile file = SafetensorsFile::from_bytes(w.serialize(), "mem");
  auto message = [&](const char* name) {
    try {
      weight_values(file.tensor(name));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("f16.weight").find("F16"), std::string::npos) << message("f16.weight");
  EXPECT_NE(message("vec.weight").find("2-D"), std::string::npos) << message("vec.weight");
  EXPECT_NE(message("nan.weight").find("element 5"), std::string::npos) << message("nan.weight");
}

}  // namespace
}  // namespace fp4cl::detail
