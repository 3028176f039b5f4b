// Batch invariance (include/fp4cl/moe.hpp): with MoeConfig::batch_invariant, and always with the
// decode and split strategies (split's passes shared by several pairs of an expert and its
// per-pair FC2 terms summed by a separate kernel give the same bits as a token alone), a token's output bits do not depend on the batch it comes in: not on the
// workspace size (how a call is cut into chunks), nor on which other tokens share the call (how
// many pairs of one expert share a tile). Generic data (Gaussian activations, block scales over
// the whole range, arbitrary global scales), where the fp32 sums are not exact and any change of
// summation order shows (measured on PoCL without batch_invariant: chunking made grouped change
// 90 to 471 of the 2880 values, depending on the scheme).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "moe_test_support.hpp"
#include "support/log_capture.hpp"

namespace fp4cl::test {
namespace {

// A strategy ("" = automatic) and whether batch_invariant is set.
struct Variant {
  std::string strategy;
  bool batch_invariant = false;
};

using Param = std::tuple<QuantScheme, Variant>;

class MoeBatchInvariance : public ::testing::TestWithParam<Param> {
 protected:
  MoeConfig config(std::int64_t max_tokens) const {
    MoeConfig c;
    c.scheme = std::get<0>(GetParam());
    c.top_k = 2;
    c.kernel = std::get<1>(GetParam()).strategy;
    c.batch_invariant = std::get<1>(GetParam()).batch_invariant;
    c.output = MoeOutput::fp32;
    c.max_tokens = max_tokens;
    return c;
  }
};

::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b, std::int64_t hidden) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " values";
  std::size_t differ = 0;
  std::string first;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) == 0) continue;
    if (++differ <= 3)
      first += fmt::format("\n  out[{}, {}]: {:a} vs {:a}", static_cast<std::int64_t>(i) / hidden,
                           static_cast<std::int64_t>(i) % hidden, a[i], b[i]);
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << a.size() << " values differ in bits:" << first;
}

// Max tokens 7 (the call runs in 7 chunks, few pairs per expert and tile) against 256 (one pass).
TEST_P(MoeBatchInvariance, ChunkingDoesNotChangeBits) {
  const std::int64_t T = 45, E = 4, H = 64, I = 128;
  const QuantScheme scheme = std::get<0>(GetParam());
  const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::generic, 601});
  const auto x = make_activations(T, H, Data::generic, 602);
  const auto ids = make_ids(T, 2, E, 603);
  const auto w = make_weights(T, 2, 604);
  MoeLayer whole = MoeLayer::create(test_context(), ex, config(256));
  MoeLayer chunked = MoeLayer::create(test_context(), ex, config(7));
  const DeviceResult one = run_topk(whole, MoeOutput::fp32, x, ids, w, T);
  const DeviceResult many = run_topk(chunked, MoeOutput::fp32, x, ids, w, T);
  ASSERT_EQ(many.call.chunk_strategies.size(), 7u);
  for (const auto& s : many.call.chunk_strategies) EXPECT_EQ(s, one.call.chunk_strategies.at(0));
  EXPECT_TRUE(same_bits(one.fp32, many.fp32, H));
  const auto ref =
      reference::moe_reference(ex, reference_options(config(7)), x, reference::routing_from_topk(ids, w, T, 2));
  EXPECT_TRUE(matches_reference(ref, many, MoeOutput::fp32));
}

// Token rows computed alone (one pair per expert tile) equal the same rows of a large batch
// (full tiles), with either strategy.
class MoeBatchComposition : public MoeBatchInvariance {};

TEST_P(MoeBatchComposition, OtherTokensInTheCallDoNotChangeBits) {
  const std::int64_t T = 40, E = 4, H = 64, I = 64;
  const QuantScheme scheme = std::get<0>(GetParam());
  const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::generic, 611});
  const auto x = make_activations(T, H, Data::generic, 612);
  const auto ids = make_ids(T, 2, E, 613);
  const auto w = make_weights(T, 2, 614);
  MoeLayer layer = MoeLayer::create(test_context(), ex, config(256));
  const DeviceResult batch = run_topk(layer, MoeOutput::fp32, x, ids, w, T);
  for (std::int64_t t : {0, 17, 39}) {
    const std::vector<std::uint16_t> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    const std::vector<std::int32_t> it(ids.begin() + 2 * t, ids.begin() + 2 * t + 2);
    const std::vector<float> wt(w.begin() + 2 * t, w.begin() + 2 * t + 2);
    const DeviceResult alone = run_topk(layer, MoeOutput::fp32, xt, it, wt, 1);
    ASSERT_EQ(alone.call.chunk_strategies, batch.call.chunk_strategies);
    const std::vector<float> row(batch.fp32.begin() + t * H, batch.fp32.begin() + (t + 1) * H);
    EXPECT_TRUE(same_bits(row, alone.fp32, H)) << "token " << t;
  }
}

// Routed mma chunks (few tokens, at most 64 pairs) under W4A4 with at least 128 local experts:
// FC1 quantizes its tiles' tokens into local memory, tiles of up to 4 pairs (mma_routed_local_tile)
// in work-groups of 2 row tiles (mma_routed_local_row_tiles),
// instead of moe_gather_pairs before it. The same bits as one call through moe_sort and
// moe_gather (96 tokens, 768 pairs); an expert that every token picks takes 2 passes a chunk of 8
// tokens.
TEST(MoeMmaRoutedW4A4, FC1QuantizesTheTilesTokensLikeTheGather) {
  const std::int64_t T = 96, E = 128, H = 64, I = 64, chunk = 8;
  const int k = 8;
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    SCOPED_TRACE(format == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4");
    const Fp4Experts ex = make_experts({format, E, H, I, Data::generic, 621});
    const auto x = make_activations(T, H, Data::generic, 622);
    auto ids = make_ids(T, k, E, 623);
    for (std::int64_t t = 0; t < T; ++t) {  // expert 5 in every row (ids stay distinct)
      bool has = false;
      for (int j = 0; j < k; ++j) has = has || ids[t * k + j] == 5;
      if (!has) ids[t * k + t % k] = 5;
    }
    const auto w = make_weights(T, k, 624);
    MoeConfig cfg;
    cfg.scheme = {format, Activations::fp4_dynamic};
    cfg.top_k = k;
    cfg.kernel = "mma";
    cfg.batch_invariant = true;
    cfg.output = MoeOutput::fp32;
    cfg.max_tokens = T;
    MoeLayer whole = MoeLayer::create(test_context(), ex, cfg);
    cfg.max_tokens = chunk;
    LogCapture log;
    MoeLayer chunked = MoeLayer::create(test_context(), ex, cfg);
    // Its FC1 work-groups take 2 row tiles (mma_routed_local_row_tiles), unstaged.
    bool routed_fc1 = false;
    for (const std::string& line : log.at(log::Level::debug))
      routed_fc1 = routed_fc1 || (line.find("program moe_mma.cl") != std::string::npos &&
                                  line.find("-DMMA_ROUTE_TILE=4") != std::string::npos &&
                                  line.find("-DMMA_RT=2 ") != std::string::npos &&
                                  line.find("-DMMA_STAGE=0") != std::string::npos);
    EXPECT_TRUE(routed_fc1) << "no routed FC1 program with 2 unstaged row tiles";
    EXPECT_EQ(whole.tile_pairs_for(T), 8);
    EXPECT_EQ(chunked.tile_pairs_for(chunk), 4);
    const DeviceResult one = run_topk(whole, MoeOutput::fp32, x, ids, w, T);
    const DeviceResult many = run_topk(chunked, MoeOutput::fp32, x, ids, w, T);
    ASSERT_EQ(many.call.chunk_strategies.size(), static_cast<std::size_t>(T / chunk));
    EXPECT_TRUE(same_bits(one.fp32, many.fp32, H));
    const auto ref =
        reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, k));
    EXPECT_TRUE(matches_reference(ref, many, MoeOutput::fp32));
    // Per chunk: expert 5's 8 pairs in 2 tiles, each other expert's pairs (ceil(count / 4)).
    std::int64_t passes = 0;
    for (std::int64_t c0 = 0; c0 < T; c0 += chunk) {
      std::vector<int> count(E, 0);
      for (std::int64_t i = c0 * k; i < (c0 + chunk) * k; ++i) ++count[ids[i]];
      EXPECT_EQ(count[5], chunk);
      for (int n : count) passes += (n + 3) / 4;
    }
    EXPECT_EQ(many.stats.expert_passes, passes);
  }
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [scheme, variant] = info.param;
  return fmt::format("{}_{}_{}{}", scheme.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4",
                     scheme.w4a16() ? "W4A16" : "W4A4", variant.strategy.empty() ? "auto" : variant.strategy,
                     variant.batch_invariant ? "_invariant" : "");
}

const QuantScheme kSchemes[] = {{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                {WeightFormat::nvfp4, Activations::bf16},
                                {WeightFormat::mxfp4, Activations::fp4_dynamic},
                                {WeightFormat::mxfp4, Activations::bf16}};

INSTANTIATE_TEST_SUITE_P(All, MoeBatchInvariance,
                         ::testing::Combine(::testing::ValuesIn(kSchemes),
                                            ::testing::Values(Variant{"grouped", true}, Variant{"decode", false},
                                                              Variant{"split", false}, Variant{"mma", true},
                                                              Variant{"", true})),
                         name);
// Forced strategies only: automatic selection runs one token with another strategy than 40.
INSTANTIATE_TEST_SUITE_P(All, MoeBatchComposition,
                         ::testing::Combine(::testing::ValuesIn(kSchemes),
                                            ::testing::Values(Variant{"grouped", true}, Variant{"decode", false},
                                                              Variant{"split", false}, Variant{"mma", true})),
                         name);

}  // namespace
}  // namespace fp4cl::test
