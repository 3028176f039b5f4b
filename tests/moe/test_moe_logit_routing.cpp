// Router logits with MoeConfig::logit_routing (fp4cl/moe_logit_routing.hpp): sigmoid scores,
// expert groups, a correction bias and a scaling factor (DeepSeek-V3's gate) on every strategy,
// against the fp64 reference's routing; the routing's checks; the reference itself on a case
// worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "moe_test_support.hpp"
#include "support/errors.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};

std::vector<float> make_bias(std::int64_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  std::vector<float> b(static_cast<std::size_t>(experts));
  for (auto& v : b) v = d(rng);
  return b;
}

MoeLogitRouting grouped(MoeLogitRouting::Scoring scoring, int groups, int top_groups, std::vector<float> bias,
                        float scaling) {
  MoeLogitRouting r;
  r.scoring = scoring;
  r.groups = groups;
  r.top_groups = top_groups;
  r.correction_bias = std::move(bias);
  r.scaling_factor = scaling;
  return r;
}

class MoeLogitRoutingTest : public ::testing::TestWithParam<std::string> {
 protected:
  MoeConfig config(const QuantScheme& scheme, int top_k, const MoeLogitRouting& routing) const {
    MoeConfig c;
    c.scheme = scheme;
    c.top_k = top_k;
    c.kernel = GetParam();
    c.logit_routing = routing;
    return c;
  }

  // Runs the layer twice on the logits; success when the routing the reference derives is
  // unambiguous, the output is within its bound and the rerun gives the same bits.
  ::testing::AssertionResult matches(const Fp4Experts& ex, const MoeConfig& cfg, std::int64_t tokens,
                                     std::uint64_t seed, const std::vector<float>& logits) const {
    const auto x = make_activations(tokens, ex.hidden, Data::exact, seed);
    const auto routing = reference::routing_from_logits(logits, tokens, static_cast<std::int64_t>(logits.size()) / tokens,
                                                        cfg.top_k, cfg.renormalize, cfg.logit_routing);
    if (routing.ambiguous) return ::testing::AssertionFailure() << "the test's logits leave the routing ambiguous";
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    const DeviceResult dev = run_logits(layer, cfg.output, x, logits, tokens);
    const auto ref = reference::moe_reference(ex, reference_options(cfg), x, routing);
    ::testing::AssertionResult close = matches_reference(ref, dev, cfg.output);
    if (!close) return close;
    const DeviceResult again = run_logits(layer, cfg.output, x, logits, tokens);
    if (dev.bf16 != again.bf16) return ::testing::AssertionFailure() << "a rerun differs";
    if (dev.stats.local_pairs != tokens * cfg.top_k)
      return ::testing::AssertionFailure() << dev.stats.local_pairs << " local pairs";
    return ::testing::AssertionSuccess();
  }
};

TEST_P(MoeLogitRoutingTest, DeepSeekGateMatchesReference) {
  // 32 experts in 8 groups of 4, 4 groups kept, k = 4, bias, × 2.5; both schemes, with and without
  // renormalization; 37 tokens in chunks of 16 (the router's token offsets).
  const std::int64_t T = 37, E = 32;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 201});
  const auto logits = make_logits(T, E, 202);
  const auto r = grouped(MoeLogitRouting::Scoring::sigmoid, 8, 4, make_bias(E, 203), 2.5f);
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4}) {
    for (bool renormalize : {true, false}) {
      MoeConfig cfg = config(scheme, 4, r);
      cfg.renormalize = renormalize;
      cfg.max_tokens = 16;
      EXPECT_TRUE(matches(ex, cfg, T, 204, logits)) << scheme.name() << ", renormalize " << renormalize;
    }
  }
}

TEST_P(MoeLogitRoutingTest, OtherGroupedFormsMatchReference) {
  const std::int64_t T = 9, E = 24;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 211});
  const auto logits = make_logits(T, E, 212);
  // Softmax scores with groups ranked by their best expert (DeepSeek-V2's group-limited greedy).
  EXPECT_TRUE(matches(ex, config(kNvW4A16, 3, grouped(MoeLogitRouting::Scoring::softmax, 6, 2, {}, 1.0f)), T, 213,
                      logits))
      << "softmax, groups";
  // Sigmoid with a bias and no groups (GLM-4.5, Kimi-K2's single group).
  EXPECT_TRUE(matches(ex, config(kNvW4A4, 6, grouped(MoeLogitRouting::Scoring::sigmoid, 1, 1, make_bias(E, 214), 2.827f)),
                      T, 215, logits))
      << "sigmoid, bias";
  // Softmax with only a scaling factor: the grouped router, not the plain one.
  EXPECT_TRUE(matches(ex, config(kNvW4A16, 2, grouped(MoeLogitRouting::Scoring::softmax, 1, 1, {}, 0.5f)), T, 216,
                      logits))
      << "softmax, scaling";
  // Sigmoid, groups without a bias: groups ranked by their best score.
  EXPECT_TRUE(matches(ex, config(kNvW4A4, 5, grouped(MoeLogitRouting::Scoring::sigmoid, 3, 2, {}, 1.0f)), T, 217,
                      logits))
      << "sigmoid, groups";
}

TEST_P(MoeLogitRoutingTest, GroupsOfManyExpertsMatchReference) {
  // More experts a group than the router compares between its looks at the rank (32), not a
  // multiple of them: 2 groups of 48 (1 kept) and one group of 80.
  const std::int64_t T = 5;
  for (const auto& [E, groups] : {std::pair<std::int64_t, int>{96, 2}, {80, 1}}) {
    const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 251});
    const auto logits = make_logits(T, E, 252);
    EXPECT_TRUE(matches(ex, config(kNvW4A16, 8, grouped(MoeLogitRouting::Scoring::sigmoid, groups, 1, make_bias(E, 253), 2.5f)),
                        T, 254, logits))
        << E << " experts in " << groups << " groups";
  }
}

TEST_P(MoeLogitRoutingTest, DroppedGroupsContributeNothing) {
  // 16 experts in 4 groups of 4, 1 group kept, k = 2. Every token's best expert alone sits in group
  // 3, but group 1's two best keys sum higher: slots go to group 1's experts 5 and 6.
  const std::int64_t T = 3, E = 16;
  std::vector<float> logits;
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<float> row(E, -3.0f);
    row[5] = 1.0f + 0.25f * static_cast<float>(t);
    row[6] = 0.75f;
    row[14] = 2.5f;
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const auto r = grouped(MoeLogitRouting::Scoring::sigmoid, 4, 1, std::vector<float>(E, 0.0f), 1.0f);
  const auto routing = reference::routing_from_logits(logits, T, E, 2, true, r);
  EXPECT_EQ(routing.ids, (std::vector<std::int32_t>{5, 6, 5, 6, 5, 6}));
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 221});
  EXPECT_TRUE(matches(ex, config(kNvW4A16, 2, r), T, 222, logits));
  // Only experts 5 and 6 are here; the rest live elsewhere and no pair is lost.
  MoeConfig cfg = config(kNvW4A16, 2, r);
  cfg.expert_map.assign(E, -1);
  cfg.expert_map[5] = 0;
  cfg.expert_map[6] = 1;
  const Fp4Experts two = make_experts({WeightFormat::nvfp4, 2, 64, 64, Data::exact, 223});
  EXPECT_TRUE(matches(two, cfg, T, 224, logits)) << "expert map";
}

TEST_P(MoeLogitRoutingTest, TiesGoToTheLowerExpertAndNaNRanksLast) {
  // Every logit equal but a NaN at expert 0: groups 0 (experts 0..3) and 1 tie on their best key,
  // and the lower is kept; expert 0's NaN key ranks last, so the 3 slots go to 1, 2 and 3.
  const std::int64_t T = 2, E = 8;
  std::vector<float> logits(T * E, 0.5f);
  logits[0] = NAN;
  logits[E] = NAN;
  const auto r = grouped(MoeLogitRouting::Scoring::sigmoid, 2, 1, {}, 1.0f);
  const auto routing = reference::routing_from_logits(logits, T, E, 3, true, r);
  EXPECT_EQ(routing.ids, (std::vector<std::int32_t>{1, 2, 3, 1, 2, 3}));
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 231});
  MoeConfig cfg = config(kNvW4A16, 3, r);
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto x = make_activations(T, 64, Data::exact, 232);
  const DeviceResult dev = run_logits(layer, cfg.output, x, logits, T);
  // The ties are exact on the device too (the same inputs give the same keys): the reference's
  // ids, each weighted 1/3.
  EXPECT_TRUE(matches_reference(reference::moe_reference(ex, reference_options(cfg), x, routing), dev, cfg.output));
}

TEST_P(MoeLogitRoutingTest, ScoresThatUnderflowRenormalizeAsDeepSeekDoes) {
  // DeepSeek's gate divides by the chosen scores' sum + 1e-20. Token 0's sigmoid scores all
  // underflow to 0 in fp32 (logits near -391): weights 0, not 0 / 0 = NaN. Token 1's are normal
  // but ~1e-26, so the 1e-20 dominates the sum: weights ~1e-6 × 2.5, not ~1.25. The bias decides
  // which experts (the scores are far below its steps).
  const std::int64_t T = 2, E = 8;
  std::vector<float> logits(T * E, -391.5f);
  for (std::int64_t e = 0; e < E; ++e) logits[E + e] = -60.0f - 0.5f * static_cast<float>(e);
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f, 0.125f, 0.375f, -0.25f, 0.0625f};
  const auto r = grouped(MoeLogitRouting::Scoring::sigmoid, 2, 1, bias, 2.5f);
  const auto routing = reference::routing_from_logits(logits, T, E, 2, true, r);
  EXPECT_EQ(routing.ids, (std::vector<std::int32_t>{3, 0, 3, 0}));
  EXPECT_LT(routing.weights[0], 1e-100);
  const double eps = 1e-20f;
  EXPECT_NEAR(routing.weights[2], 2.5 * std::exp(-61.5) / (std::exp(-61.5) + std::exp(-60.0) + eps), 1e-18);
  EXPECT_GT(routing.weight_abs_error, 0.0);
  EXPECT_LT(routing.weight_abs_error, 1e-15);
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 261});
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4}) {
    MoeConfig cfg = config(scheme, 2, r);
    EXPECT_TRUE(matches(ex, cfg, T, 262, logits)) << scheme.name();
    cfg.output = MoeOutput::fp32;
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    const DeviceResult dev = run_logits(layer, cfg.output, make_activations(T, 64, Data::exact, 262), logits, T);
    for (std::int64_t i = 0; i < 64; ++i) EXPECT_EQ(dev.fp32[static_cast<std::size_t>(i)], 0.0f) << "token 0, " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeLogitRoutingTest, ::testing::Values("grouped", "decode", "split", "mma"),
                         [](const auto& p) { return p.param; });

TEST(MoeLogitRoutingChecks, BadRoutingsAreClearErrors) {
  const std::int64_t E = 16;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 241});
  auto create = [&](const MoeLogitRouting& r, int top_k = 2) {
    MoeConfig c;
    c.scheme = kNvW4A16;
    c.top_k = top_k;
    c.logit_routing = r;
    MoeLayer::create(test_context(), ex, c);
  };
  using S = MoeLogitRouting::Scoring;
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 3, 1, {}, 1.0f)), "logit_routing.groups = 3 must divide the 16 global experts");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 0, 1, {}, 1.0f)), "logit_routing.groups = 0");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 4, 0, {}, 1.0f)), "logit_routing.top_groups = 0 must be in [1, groups = 4]");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 4, 5, {}, 1.0f)), "top_groups = 5");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 4, 1, {}, 1.0f), 5),
                   "top_k = 5 exceeds the 4 experts that logit_routing's top_groups = 1 groups of 4 leave");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 1, 1, std::vector<float>(15, 0.0f), 1.0f)),
                   "correction_bias has 15 values; expected one per global expert (16)");
  std::vector<float> nan_bias(E, 0.0f);
  nan_bias[9] = NAN;
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 1, 1, nan_bias, 1.0f)), "correction_bias[9] = nan is not finite");
  EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 16, 2, std::vector<float>(E, 0.0f), 1.0f)),
                   "ranks groups by their two best keys");
  for (float bad : {0.0f, -1.0f, NAN, INFINITY})
    EXPECT_ERROR_HAS(create(grouped(S::sigmoid, 1, 1, {}, bad)), "logit_routing.scaling_factor");
  MoeLogitRouting unknown;
  unknown.scoring = static_cast<S>(7);
  EXPECT_ERROR_HAS(create(unknown), "logit_routing.scoring = 7 is neither softmax nor sigmoid");
  // The groups' limit.
  const Fp4Experts many = make_experts({WeightFormat::nvfp4, 128, 64, 64, Data::exact, 242});
  MoeConfig c;
  c.scheme = kNvW4A16;
  c.top_k = 2;
  c.logit_routing = grouped(S::sigmoid, 128, 2, {}, 1.0f);
  EXPECT_ERROR_HAS(MoeLayer::create(test_context(), many, c), "must divide the 128 global experts and be in [1, 64]");
}

TEST(MoeLogitRoutingReference, WorkedByHand) {
  // 8 experts in 4 groups of 2, 2 groups kept, k = 3, sigmoid, bias, renormalized, × 2.
  // keys c = sigmoid(l) + b; group scores: the two keys' sum.
  const std::vector<float> l = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 0.25f, -2.0f, 3.0f};
  const std::vector<float> b = {0.1f, 0.0f, 0.0f, -0.6f, 0.0f, 0.0f, 0.0f, -0.9f};
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> c(8);
  for (int e = 0; e < 8; ++e) c[e] = sig(l[e]) + b[e];
  // Groups: {0,1} 0.6+0.731 = 1.331, {2,3} 0.269+0.281 = 0.550, {4,5} 0.622+0.562 = 1.184,
  // {6,7} 0.119+0.053 = 0.172: kept 0 and 2; experts by key: 1 (0.731), 4 (0.622), 0 (0.6), 5.
  const auto r = reference::routing_from_logits(l, 1, 8, 3, true,
                                                grouped(MoeLogitRouting::Scoring::sigmoid, 4, 2, b, 2.0f));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 4, 0}));
  EXPECT_FALSE(r.ambiguous);
  const double sum = sig(1.0) + sig(0.5) + sig(0.0);
  ASSERT_EQ(r.weights.size(), 3u);
  EXPECT_NEAR(r.weights[0], 2.0 * sig(1.0) / sum, 1e-15);
  EXPECT_NEAR(r.weights[1], 2.0 * sig(0.5) / sum, 1e-15);
  EXPECT_NEAR(r.weights[2], 2.0 * sig(0.0) / sum, 1e-15);
  EXPECT_GT(r.weight_rel_error, 0.0);
  EXPECT_LT(r.weight_rel_error, 1e-5);
  // Plain softmax gives the plain reference's routing; keys a hair apart are ambiguous.
  const auto plain = reference::routing_from_logits(l, 1, 8, 3, true, MoeLogitRouting{});
  EXPECT_EQ(plain.ids, reference::routing_from_logits(l, 1, 8, 3, true).ids);
  const std::vector<float> close = {0.5f, std::nextafter(0.5f, 1.0f), -1.0f, -1.0f};
  EXPECT_TRUE(reference::routing_from_logits(close, 1, 4, 1, true,
                                             grouped(MoeLogitRouting::Scoring::sigmoid, 1, 1, {}, 1.0f))
                  .ambiguous);
}

}  // namespace
}  // namespace fp4cl::test
