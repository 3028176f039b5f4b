// The mma strategy's FC1 routing router logits itself (MoeTiles::route_logits, kernels/moe_mma.cl's
// MMA_ROUTE_LOGITS with kernels/moe_route_token.cl): no router launch, the same bits as the
// router kernel (mma.route_logits 1), the reference's output. One-token chunks (a work-group a
// pair) and routed chunks (tiles found in FC1), both schemes; plain softmax top-k with and without
// renormalization, DeepSeek-V3's gate with a shared expert, Kimi-K2's over 384 experts, softmax
// with groups, an expert_map, tied logits; and which kernel routes where by default.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe_registry.hpp"  // mma_fc1_routes_chunk
#include "moe_test_support.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};

bool launches(const MoeCall& call, const std::string& kernel) {
  return std::any_of(call.launches.begin(), call.launches.end(),
                     [&](const MoeLaunch& l) { return l.kernel == kernel; });
}

std::string launch_list(const MoeCall& call) {
  std::string s;
  for (const MoeLaunch& l : call.launches) s += (s.empty() ? "" : ", ") + l.kernel;
  return s;
}

MoeLayer mma_layer(const Fp4Experts& ex, const MoeConfig& cfg, int route_logits) {
  const ScopedEnv tiles("FP4CL_MOE_TILES", "mma.route_logits=" + std::to_string(route_logits));
  MoeConfig c = cfg;
  c.kernel = "mma";
  return MoeLayer::create(test_context(), ex, c);
}

// The layer of `cfg` over `ex` on `tokens` tokens of logits, routed by FC1 (mma.route_logits 2)
// and by the router kernel (1): success when FC1 routed (no router launch) and the other did, the
// two outputs and statistics are the same bits, and they are within the reference's bound.
// `shared`: shared experts among ex's (the last), after the routed slots in the reference.
// `tied`: logits with ties; where the reference calls the routing ambiguous, only the two outputs
// are compared.
::testing::AssertionResult fc1_routes_like_the_router(const Fp4Experts& ex, const MoeConfig& cfg, std::int64_t tokens,
                                                      const std::vector<float>& logits, std::uint64_t seed,
                                                      int shared = 0, bool tied = false) {
  MoeLayer by_fc1 = mma_layer(ex, cfg, 2), by_router = mma_layer(ex, cfg, 1);
  const auto x = make_activations(tokens, ex.hidden, Data::exact, seed);
  const DeviceResult a = run_logits(by_fc1, cfg.output, x, logits, tokens);
  const DeviceResult b = run_logits(by_router, cfg.output, x, logits, tokens);
  if (launches(a.call, "moe_route_grouped") || !launches(a.call, "moe_mma_fc1"))
    return ::testing::AssertionFailure() << "FC1 did not route the logits itself: " << launch_list(a.call);
  if (!launches(b.call, "moe_route_grouped"))
    return ::testing::AssertionFailure() << "the router kernel did not route: " << launch_list(b.call);
  if (a.bf16 != b.bf16) return ::testing::AssertionFailure() << "the outputs differ";
  if (a.stats.local_pairs != b.stats.local_pairs || a.stats.expert_passes != b.stats.expert_passes)
    return ::testing::AssertionFailure() << "local pairs " << a.stats.local_pairs << " and " << b.stats.local_pairs
                                         << ", expert passes " << a.stats.expert_passes << " and "
                                         << b.stats.expert_passes;
  const std::int64_t global_experts = static_cast<std::int64_t>(logits.size()) / tokens;
  reference::MoeRouting routing = reference::routing_from_logits(logits, tokens, global_experts, cfg.top_k,
                                                                 cfg.renormalize, cfg.logit_routing);
  if (routing.ambiguous && !tied)
    return ::testing::AssertionFailure() << "the test's logits leave the routing ambiguous";
  if (routing.ambiguous) return ::testing::AssertionSuccess();
  if (shared > 0)
    routing = reference::with_shared_experts(routing, static_cast<std::int32_t>(ex.num_experts - shared), shared);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, routing);
  if (::testing::AssertionResult close = matches_reference(ref, a, cfg.output); !close) return close;
  const DeviceResult again = run_logits(by_fc1, cfg.output, x, logits, tokens);
  if (again.bf16 != a.bf16) return ::testing::AssertionFailure() << "a rerun differs";
  return ::testing::AssertionSuccess();
}

MoeConfig config(const QuantScheme& scheme, int top_k) {
  MoeConfig c;
  c.scheme = scheme;
  c.top_k = top_k;
  return c;
}

TEST(MoeMmaRouteLogits, SoftmaxTopkInFc1IsTheRoutersBits) {
  // 16 experts, k = 4: one token (a work-group a pair) and 3 (routed tiles under W4A16; W4A4's 3
  // tokens gather their rows first, so the router kernel routes them: see below).
  const std::int64_t E = 16;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 301});
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4})
    for (const bool renormalize : {true, false})
      for (const std::int64_t T : {1, 3}) {
        if (scheme == kNvW4A4 && T > 1) continue;
        MoeConfig cfg = config(scheme, 4);
        cfg.renormalize = renormalize;
        EXPECT_TRUE(fc1_routes_like_the_router(ex, cfg, T, make_logits(T, E, 302 + T), 303))
            << scheme.name() << ", renormalize " << renormalize << ", T = " << T;
      }
}

TEST(MoeMmaRouteLogits, GatesInFc1AreTheRoutersBits) {
  // 32 routed experts in 8 groups of 4 (4 kept), a correction bias, × 2.5, k = 4, and a shared
  // expert (the 33rd): FC1 writes its slot too, weight 1.
  const std::int64_t E = 32;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E + 1, 64, 64, Data::exact, 311});
  MoeLogitRouting r = MoeLogitRouting::deepseek_v3(std::vector<float>(static_cast<std::size_t>(E)));
  for (std::int64_t e = 0; e < E; ++e)
    r.correction_bias[static_cast<std::size_t>(e)] = 0.03f * static_cast<float>(e % 7);
  for (const std::int64_t T : {1, 3}) {
    MoeConfig cfg = config(kNvW4A16, 4);
    cfg.logit_routing = r;
    cfg.shared_experts = 1;
    EXPECT_TRUE(fc1_routes_like_the_router(ex, cfg, T, make_logits(T, E, 312 + T), 313, 1)) << "T = " << T;
  }
  // Kimi-K2's gate: sigmoid, one group, a bias, × 2.827, over 384 experts: more than the 256
  // partial lanes (ROUTE_LOCAL), each lane's partials over two or more experts.
  {
    const std::int64_t K2 = 384;
    const Fp4Experts kimi = make_experts({WeightFormat::nvfp4, K2, 64, 64, Data::exact, 317});
    MoeConfig k2 = config(kNvW4A16, 8);
    k2.logit_routing.scoring = MoeLogitRouting::Scoring::sigmoid;
    k2.logit_routing.scaling_factor = 2.827f;
    for (std::int64_t e = 0; e < K2; ++e)
      k2.logit_routing.correction_bias.push_back(0.01f * static_cast<float>(e % 11));
    for (const std::int64_t T : {1, 3})
      EXPECT_TRUE(fc1_routes_like_the_router(kimi, k2, T, make_logits(T, K2, 318 + T), 319))
          << "384 experts, T = " << T;
  }
  // Softmax scores in 4 groups of 8, 2 kept (DeepSeek-V2's group-limited greedy), one token, W4A4.
  MoeConfig cfg = config(kNvW4A4, 3);
  cfg.logit_routing.groups = 4;
  cfg.logit_routing.top_groups = 2;
  const Fp4Experts routed_only = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 314});
  EXPECT_TRUE(fc1_routes_like_the_router(routed_only, cfg, 1, make_logits(1, E, 315), 316)) << "softmax, groups";
}

TEST(MoeMmaRouteLogits, ExpertMapAndTiedLogitsInFc1AreTheRoutersBits) {
  // 16 global experts, the even ones on this rank (8 local): pairs of the others are dropped.
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 64, 64, Data::exact, 321});
  MoeConfig cfg = config(kNvW4A16, 4);
  for (std::int32_t e = 0; e < 16; ++e) cfg.expert_map.push_back(e % 2 == 0 ? e / 2 : -1);
  for (const std::int64_t T : {1, 3})
    EXPECT_TRUE(fc1_routes_like_the_router(ex, cfg, T, make_logits(T, 16, 322 + T), 323)) << "T = " << T;
  // Ties: every logit of the token equal but two; the ties go to the lower ids, slots 2 and 3 to
  // experts 0 and 1.
  std::vector<float> tied(16, 0.25f);
  tied[9] = 1.0f;
  tied[3] = 0.5f;
  EXPECT_TRUE(fc1_routes_like_the_router(ex, cfg, 1, tied, 324, 0, true)) << "tied logits";
}

TEST(MoeMmaRouteLogits, RoutedW4A4TilesQuantizedInFc1AreTheRoutersBits) {
  // 128 experts: routed W4A4 chunks quantize their tiles' tokens in FC1 (mma_routed_local_tile),
  // with no moe_gather_pairs before it, so FC1 can route them. k = 8, 3 tokens.
  const std::int64_t E = 128;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 331});
  const MoeConfig cfg = config(kNvW4A4, 8);
  EXPECT_TRUE(fc1_routes_like_the_router(ex, cfg, 3, make_logits(3, E, 332), 333));
}

TEST(MoeMmaRouteLogits, TheDefaultRoutesSmallChunksInFc1AndTheRestByTheRouter) {
  // mma.route_logits 0 (automatic): one-token chunks in FC1, routed chunks in FC1 where
  // mma_fc1_routes_chunk takes them (at most 2 tokens and 256 logits; measured on the H100,
  // bench/gpu/history.md), the others by the router kernel; 1: the router kernel for all; 2: FC1
  // for all. W4A4 routed chunks that gather their rows first keep the router even with 2.
  static_assert(mma_fc1_routes_chunk(2, 16) && !mma_fc1_routes_chunk(3, 16) && !mma_fc1_routes_chunk(2, 192),
                "the cases below");
  struct Case {
    std::int64_t experts;
    QuantScheme scheme;
    int route_logits;
    bool fc1_routes[3];  // chunks of 1, 2 and 3 tokens
  };
  for (const Case& c : {Case{16, kNvW4A16, 0, {true, true, false}}, Case{16, kNvW4A16, 1, {false, false, false}},
                        Case{16, kNvW4A16, 2, {true, true, true}}, Case{16, kNvW4A4, 2, {true, false, false}},
                        Case{16, kNvW4A4, 0, {true, false, false}}, Case{192, kNvW4A16, 0, {true, false, false}},
                        Case{192, kNvW4A16, 2, {true, true, true}}}) {
    const std::int64_t E = c.experts;
    const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 341});
    const auto x3 = make_activations(3, ex.hidden, Data::exact, 342);
    const auto logits = make_logits(3, E, 343);
    MoeLayer layer = mma_layer(ex, config(c.scheme, 4), c.route_logits);
    for (std::int64_t t = 1; t <= 3; ++t) {
      const std::vector<std::uint16_t> x(x3.begin(), x3.begin() + t * ex.hidden);
      const std::vector<float> l(logits.begin(), logits.begin() + t * E);
      const DeviceResult r = run_logits(layer, MoeOutput::bf16, x, l, t);
      EXPECT_EQ(!launches(r.call, "moe_route_grouped"), c.fc1_routes[t - 1])
          << E << " experts, " << c.scheme.name() << " route_logits " << c.route_logits << ", " << t
          << " tokens: " << launch_list(r.call);
    }
  }
}

}  // namespace
}  // namespace fp4cl::test
