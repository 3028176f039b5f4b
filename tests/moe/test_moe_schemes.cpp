// The layer against the scalar reference: every scheme × strategy over a set of shapes.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <tuple>

#include "fp4cl/error.hpp"
#include "moe_test_support.hpp"

namespace fp4cl::test {
namespace {

struct Shape {
  std::int64_t tokens, experts;
  int top_k;
  std::int64_t hidden, intermediate;
};

// Every strategy runs every shape (each forced), so decode and split also see many tokens and
// grouped few.
const Shape kShapes[] = {
    {0, 8, 2, 64, 64},     {1, 8, 2, 64, 128},  {2, 32, 4, 128, 64}, {5, 128, 8, 64, 64},
    {64, 32, 4, 96, 160},  {300, 8, 2, 64, 32}, {7, 1, 1, 64, 64},   {2, 2, 2, 2880, 2880},
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << fmt::format("T={} E={} k={} H={} I={}", s.tokens, s.experts, s.top_k, s.hidden, s.intermediate);
}

using Param = std::tuple<QuantScheme, std::string, Shape>;

class MoeSchemes : public ::testing::TestWithParam<Param> {};

TEST_P(MoeSchemes, MatchesReference) {
  const auto& [scheme, strategy, s] = GetParam();
  const std::uint64_t seed = static_cast<std::uint64_t>(s.tokens * 131 + s.experts * 7 + s.hidden);
  const Fp4Experts ex = make_experts({scheme.weight, s.experts, s.hidden, s.intermediate, Data::exact, seed});
  MoeConfig cfg;
  cfg.scheme = scheme;
  cfg.top_k = s.top_k;
  cfg.kernel = strategy;
  if (strategy == "mma" && (s.hidden % 64 != 0 || s.intermediate % 64 != 0)) {
    // The MMA layout's chunks of 64: refused by name, with the reason.
    try {
      MoeLayer::create(test_context(), ex, cfg);
      ADD_FAILURE() << "mma accepted H = " << s.hidden << ", I = " << s.intermediate;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MoE kernel strategy 'mma'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("must be multiples of 64"), std::string::npos) << e.what();
    }
    return;
  }
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto x = make_activations(s.tokens, s.hidden, Data::exact, seed + 1);
  const auto ids = make_ids(s.tokens, s.top_k, s.experts, seed + 2);
  const auto w = make_weights(s.tokens, s.top_k, seed + 3);
  const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, s.tokens);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, s.tokens, s.top_k));
  EXPECT_TRUE(matches_reference(ref, dev, cfg.output));
  // The data keeps FC1 exact, which keeps the tolerance tight: not a vacuous test. (What
  // remains is mostly the worst-case rounding bound of the FC2 sum, γ(I)·Σ|terms|, about one
  // BF16 ulp of a typical output at I = 2880 and far less at small I.)
  EXPECT_EQ(ref.fc1_rows_exact, ref.fc1_rows);
  EXPECT_LE(median_bound_ulps(ref), 2.0);
  EXPECT_EQ(dev.stats.local_pairs, s.tokens * s.top_k);
  for (const auto& used : dev.call.chunk_strategies) EXPECT_EQ(used, strategy);
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [scheme, strategy, s] = info.param;
  return fmt::format("{}_{}_{}_T{}_E{}_k{}_H{}_I{}", scheme.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4",
                     scheme.w4a16() ? "W4A16" : "W4A4", strategy, s.tokens, s.experts, s.top_k, s.hidden,
                     s.intermediate);
}

const QuantScheme kSchemes[] = {{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                {WeightFormat::nvfp4, Activations::bf16},
                                {WeightFormat::mxfp4, Activations::fp4_dynamic},
                                {WeightFormat::mxfp4, Activations::bf16}};

INSTANTIATE_TEST_SUITE_P(All, MoeSchemes,
                         ::testing::Combine(::testing::ValuesIn(kSchemes), ::testing::Values("grouped", "decode", "split", "mma"),
                                            ::testing::ValuesIn(kShapes)),
                         name);

}  // namespace
}  // namespace fp4cl::test
