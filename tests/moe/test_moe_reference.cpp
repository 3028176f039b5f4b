// The scalar reference itself: BF16 rounding, routing, a closed-form expert, and its bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/formats.cl"
#include "moe_test_support.hpp"
#include "fp4cl/error.hpp"
#include "reference/moe_reference.hpp"

namespace fp4cl::test {
namespace {

using reference::round_to_bf16;

TEST(MoeReference, RoundToBf16AgreesWithTheCodecOnFloats) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x7F7FFFFFu);
  for (int i = 0; i < 100000; ++i) {
    std::uint32_t u = bits(rng) | (i % 2 ? 0x80000000u : 0u);
    if (i % 3 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact ties
    const float f = fp4cl_as_float(u);
    ASSERT_EQ(round_to_bf16(f), static_cast<double>(bf16_to_float(float_to_bf16(f)))) << std::hexfloat << f;
  }
}

TEST(MoeReference, RoundToBf16RoundsDoublesOnce) {
  // 1 + 2^-8 + 2^-40 is above the tie: a detour through float would round it down.
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-7);
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8), 1.0);  // tie to even
  EXPECT_EQ(round_to_bf16(-3.0 * 0x1p-130), -3.0 * 0x1p-130);  // BF16 subnormal
  EXPECT_TRUE(std::isinf(round_to_bf16(0x1.FFp127)));
}

TEST(MoeReference, RoutingFromLogits) {
  // Token 0: ties (experts 1 and 3 at 2.0: the lower index first), a NaN never selected first.
  // Token 1: distinct logits.
  const std::vector<float> logits = {0.5f, 2.0f, NAN, 2.0f, -1.0f, 1.0f, 0.0f, 3.0f, -2.0f, 0.25f};
  const auto r = reference::routing_from_logits(logits, 2, 5, 3, false);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 3, 0, 2, 0, 4}));
  const std::vector<double> l1 = {1.0, 0.0, 3.0, -2.0, 0.25};
  double sum = 0;
  for (double v : l1) sum += std::exp(v - 3.0);
  EXPECT_NEAR(r.weights[3], 1.0 / sum, 1e-15);
  EXPECT_NEAR(r.weights[4], std::exp(-2.0) / sum, 1e-15);
  EXPECT_GT(r.weight_rel_error, 0.0);
  EXPECT_LT(r.weight_rel_error, 1e-5);
  const auto n = reference::routing_from_logits(logits, 2, 5, 3, true);
  EXPECT_NEAR(n.weights[3] + n.weights[4] + n.weights[5], 1.0, 1e-15);
  EXPECT_NEAR(n.weights[3] / n.weights[4], r.weights[3] / r.weights[4], 1e-12);
}

// One expert with every weight 1.0 (code 2, scale 1.0, global scales 1): h = Σx for every gate
// and up row, a = bf16(silu(Σx)·Σx) for every r, y_n = Σ_r a = I·a.
TEST(MoeReference, ClosedFormExpert) {
  const std::int64_t H = 32, I = 16;
  Fp4Experts ex;
  ex.format = WeightFormat::nvfp4;
  ex.num_experts = 1;
  ex.hidden = H;
  ex.intermediate = I;
  ex.w13_packed.assign(2 * I * H / 2, 0x22);
  ex.w13_scales.assign(2 * I * H / 16, 0x38);
  ex.w2_packed.assign(H * I / 2, 0x22);
  ex.w2_scales.assign(H * I / 16, 0x38);
  ex.w13_global_scale = {1.0f, 1.0f};
  ex.w2_global_scale = {1.0f};
  std::vector<std::uint16_t> x(H);
  double sum = 0;
  for (std::int64_t i = 0; i < H; ++i) {
    const float v = static_cast<float>((i % 7) - 3) / 16.0f;
    x[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(float_to_bf16(v));
    sum += v;
  }
  reference::MoeReferenceOptions opt;
  opt.scheme = {WeightFormat::nvfp4, Activations::bf16};
  const auto ref = reference::moe_reference(ex, opt, x, reference::routing_from_topk({0}, {0.75f}, 1, 1));
  const double a = round_to_bf16(sum / (1 + std::exp(-sum)) * sum);
  for (std::int64_t n = 0; n < H; ++n) EXPECT_DOUBLE_EQ(ref.value[static_cast<std::size_t>(n)], 0.75 * I * a);
  // FC1 is exact here; the rest of the bound is the silu evaluation and the small sums.
  EXPECT_EQ(ref.fc1_rows_exact, ref.fc1_rows);
  EXPECT_LT(ref.bound[0], 1e-5 * std::fabs(ref.value[0]));
}

TEST(MoeReference, RejectsInvalidIds) {
  const Fp4Experts ex = make_experts({WeightFormat::mxfp4, 4, 64, 32, Data::exact, 3});
  reference::MoeReferenceOptions opt;
  opt.scheme = {WeightFormat::mxfp4, Activations::bf16};
  const auto x = make_activations(2, 64, Data::exact, 4);
  EXPECT_THROW(reference::moe_reference(ex, opt, x, reference::routing_from_topk({0, 1, 4, 2}, {1, 1, 1, 1}, 2, 2)),
               Error);
}

}  // namespace
}  // namespace fp4cl::test
