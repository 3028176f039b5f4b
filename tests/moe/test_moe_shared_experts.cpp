// Shared experts (MoeConfig::shared_experts: DeepSeek-V3's, Kimi-K2's, GLM-4.5's): the last S
// experts go with every token, weight 1, after its k routed slots. On every strategy, from top-k
// ids and from router logits (softmax and DeepSeek's gate), against the fp64 reference given the
// same pairs; invalid ids named in the caller's [T, k]; the configurations refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moe_test_support.hpp"
#include "support/errors.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};

class MoeSharedExperts : public ::testing::TestWithParam<std::string> {
 protected:
  MoeConfig config(const QuantScheme& scheme, int top_k, int shared) const {
    MoeConfig c;
    c.scheme = scheme;
    c.top_k = top_k;
    c.shared_experts = shared;
    c.kernel = GetParam();
    return c;
  }
};

TEST_P(MoeSharedExperts, TopkIdsMatchReference) {
  // 7 routed experts and 1 shared, k = 2; 37 tokens in chunks of 16; both schemes; twice the same bits.
  const std::int64_t T = 37, E = 8;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 401});
  const auto x = make_activations(T, 64, Data::exact, 402);
  const auto ids = make_ids(T, 2, E - 1, 403);
  const auto w = make_weights(T, 2, 404);
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4}) {
    MoeConfig cfg = config(scheme, 2, 1);
    cfg.max_tokens = 16;
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    EXPECT_EQ(layer.top_k(), 2);
    EXPECT_EQ(layer.shared_experts(), 1);
    EXPECT_EQ(layer.num_global_experts(), E - 1);
    const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, T);
    const auto ref = reference::moe_reference(
        ex, reference_options(cfg), x,
        reference::with_shared_experts(reference::routing_from_topk(ids, w, T, 2), E - 1, 1));
    EXPECT_TRUE(matches_reference(ref, dev, cfg.output)) << scheme.name();
    EXPECT_EQ(dev.stats.local_pairs, T * 3);
    EXPECT_EQ(run_topk(layer, cfg.output, x, ids, w, T).bf16, dev.bf16) << "a rerun differs";
    // The shared expert is what the routed sum misses: without it the reference is elsewhere.
    const auto routed_only =
        reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
    EXPECT_FALSE(matches_reference(routed_only, dev, cfg.output)) << scheme.name();
  }
}

TEST_P(MoeSharedExperts, RouterLogitsMatchReference) {
  // DeepSeek's gate over 16 routed experts (4 groups of 4, 2 kept, bias, × 2.5, k = 4) and 2
  // shared; and softmax top-k with 1 shared.
  const std::int64_t T = 9, E_routed = 16;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E_routed + 2, 64, 64, Data::exact, 411});
  const auto x = make_activations(T, 64, Data::exact, 412);
  const auto logits = make_logits(T, E_routed, 413);
  MoeConfig cfg = config(kNvW4A4, 4, 2);
  cfg.logit_routing.scoring = MoeLogitRouting::Scoring::sigmoid;
  cfg.logit_routing.groups = 4;
  cfg.logit_routing.top_groups = 2;
  for (std::int64_t e = 0; e < E_routed; ++e) cfg.logit_routing.correction_bias.push_back(0.0625f * static_cast<float>(e % 3));
  cfg.logit_routing.scaling_factor = 2.5f;
  MoeLayer gated = MoeLayer::create(test_context(), ex, cfg);
  const auto gate = reference::routing_from_logits(logits, T, E_routed, 4, true, cfg.logit_routing);
  ASSERT_FALSE(gate.ambiguous);
  EXPECT_TRUE(matches_reference(
      reference::moe_reference(ex, reference_options(cfg), x, reference::with_shared_experts(gate, E_routed, 2)),
                                run_logits(gated, cfg.output, x, logits, T), cfg.output))
      << "DeepSeek's gate";

  const Fp4Experts ex17 = make_experts({WeightFormat::nvfp4, E_routed + 1, 64, 64, Data::exact, 414});
  MoeConfig soft = config(kNvW4A16, 3, 1);
  MoeLayer softmax = MoeLayer::create(test_context(), ex17, soft);
  const auto routing = reference::routing_from_logits(logits, T, E_routed, 3, true);
  EXPECT_TRUE(matches_reference(
      reference::moe_reference(ex17, reference_options(soft), x, reference::with_shared_experts(routing, E_routed, 1)),
      run_logits(softmax, soft.output, x, logits, T), soft.output))
      << "softmax";
}

TEST_P(MoeSharedExperts, FewTokensMatchReference) {
  // One token (mma: a tile a pair) and 5 (mma: tiles routed in FC1) with 2 shared experts of 6.
  const std::int64_t E = 6;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 441});
  for (const std::int64_t T : {1, 5}) {
    const auto x = make_activations(T, 64, Data::exact, 442);
    const auto ids = make_ids(T, 3, E - 2, 443);
    const auto w = make_weights(T, 3, 444);
    for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4}) {
      const MoeConfig cfg = config(scheme, 3, 2);
      MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
      const auto ref = reference::moe_reference(
          ex, reference_options(cfg), x,
          reference::with_shared_experts(reference::routing_from_topk(ids, w, T, 3), E - 2, 2));
      EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output))
          << scheme.name() << " T = " << T;
    }
  }
}

TEST_P(MoeSharedExperts, InvalidIdsAreNamedInTheCallersSlots) {
  const std::int64_t T = 6, E = 5;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 421});
  const auto x = make_activations(T, 64, Data::exact, 422);
  MoeConfig cfg = config(kNvW4A16, 2, 1);
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  auto ids = make_ids(T, 2, E - 1, 423);
  ids[3 * 2 + 1] = 4;  // the shared expert's local id: not a routed id
  EXPECT_ERROR_HAS(run_topk(layer, cfg.output, x, ids, make_weights(T, 2, 424), T),
                   "topk_ids[3, 1] = 4 is outside [0, 4)");
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeSharedExperts, ::testing::Values("grouped", "decode", "split", "mma"),
                         [](const auto& p) { return p.param; });

TEST(MoeSharedExpertsChecks, BadConfigurationsAreClearErrors) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 431});
  MoeConfig c;
  c.scheme = kNvW4A16;
  c.top_k = 1;
  c.shared_experts = 4;
  EXPECT_ERROR_HAS(MoeLayer::create(test_context(), ex, c), "shared_experts = 4 must be in [0, 4)");
  c.shared_experts = -1;
  EXPECT_ERROR_HAS(MoeLayer::create(test_context(), ex, c), "shared_experts = -1");
  c.shared_experts = 1;
  c.expert_map = {0, 1, -1};
  EXPECT_ERROR_HAS(MoeLayer::create(test_context(), ex, c), "shared_experts = 1 with an expert_map");
  c.expert_map.clear();
  c.top_k = 4;  // 3 routed experts
  EXPECT_ERROR_HAS(MoeLayer::create(test_context(), ex, c), "top_k = 4 must be in [1, 3]");
}

}  // namespace
}  // namespace fp4cl::test
