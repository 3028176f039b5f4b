// Bit-exact comparisons of prepared weights: loaded against what a test wrote or quantized
// (the checkpoint-loading tests, the gpt-oss layout test).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fp4cl/weights.hpp"

namespace fp4cl::test {

inline std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float x : v) out.push_back(bits(x));
  return out;
}

// Two Fp4Experts equal in every byte and every scale bit.
inline void expect_experts_equal(const Fp4Experts& a, const Fp4Experts& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.intermediate, b.intermediate);
  EXPECT_EQ(a.w13_packed, b.w13_packed);
  EXPECT_EQ(a.w13_scales, b.w13_scales);
  EXPECT_EQ(a.w2_packed, b.w2_packed);
  EXPECT_EQ(a.w2_scales, b.w2_scales);
  EXPECT_EQ(bits(a.w13_global_scale), bits(b.w13_global_scale));
  EXPECT_EQ(bits(a.w2_global_scale), bits(b.w2_global_scale));
  EXPECT_EQ(bits(a.w13_input_global_scale), bits(b.w13_input_global_scale));
  EXPECT_EQ(bits(a.w2_input_global_scale), bits(b.w2_input_global_scale));
  EXPECT_EQ(bits(a.w13_input_scale), bits(b.w13_input_scale));
  EXPECT_EQ(bits(a.w2_input_scale), bits(b.w2_input_scale));
  EXPECT_EQ(bits(a.w13_bias), bits(b.w13_bias));
  EXPECT_EQ(bits(a.w2_bias), bits(b.w2_bias));
}

// Two Fp4Weights equal in every byte and every scale bit.
inline void expect_weights_equal(const Fp4Weight& a, const Fp4Weight& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(bits(a.global_scale), bits(b.global_scale));
  EXPECT_EQ(bits(a.input_global_scale), bits(b.input_global_scale));
  EXPECT_EQ(bits(a.input_scale), bits(b.input_scale));
}

}  // namespace fp4cl::test
