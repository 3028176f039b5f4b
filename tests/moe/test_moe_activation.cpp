// FC1's activation (MoeConfig::activation: SwiGLU or gpt-oss's clamped form) and the experts'
// biases (Fp4Experts::w13_bias, w2_bias), on every scheme × strategy against the scalar
// reference, and their bad inputs.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "fp4cl/error.hpp"
#include "moe_test_support.hpp"
#include "checkpoint/portable_random.hpp"
#include "kernels/moe_registry.hpp"  // mma_native

namespace fp4cl::test {
namespace {

constexpr std::int64_t kExperts = 32, kHidden = 64, kInter = 128;
constexpr int kTopK = 4;

// Biases on the grid k/8 in [-3, 3]: gate and up move across the clamp and the SwiGLU's bend.
void add_biases(Fp4Experts& ex, std::uint64_t seed) {
  detail::PortableRandom rng(seed);
  const auto draw = [&] { return static_cast<float>(static_cast<int>(rng.next() % 49) - 24) / 8.0f; };
  ex.w13_bias.resize(static_cast<std::size_t>(ex.num_experts * 2 * ex.intermediate));
  ex.w2_bias.resize(static_cast<std::size_t>(ex.num_experts * ex.hidden));
  for (float& b : ex.w13_bias) b = draw();
  for (float& b : ex.w2_bias) b = draw();
}

// limit 1: most gate and up sums clamp; gpt-oss's 7: some do.
MoeActivation clamped(float limit) { return {MoeActivation::Kind::swiglu_clamped, 1.702f, limit}; }

using Param = std::tuple<QuantScheme, std::string>;
class MoeActivationSchemes : public ::testing::TestWithParam<Param> {};

// One layer a scheme and strategy (each compiles its own programs), at 1 token (mma: a tile a
// pair), 5 (20 pairs: mma's routed chunks) and 40 (160 pairs: sorted tiles). limit 1: most gate
// and up sums clamp.
TEST_P(MoeActivationSchemes, ClampedSwigluWithBiasesMatchesReference) {
  const auto& [scheme, strategy] = GetParam();
  const std::uint64_t seed = scheme.w4a16() ? 3 : 5;
  Fp4Experts ex = make_experts({scheme.weight, kExperts, kHidden, kInter, Data::exact, seed});
  add_biases(ex, seed + 7);
  MoeConfig cfg;
  cfg.scheme = scheme;
  cfg.top_k = kTopK;
  cfg.kernel = strategy;
  cfg.activation = clamped(1.0f);
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  for (const std::int64_t tokens : {1, 5, 40}) {
    SCOPED_TRACE(fmt::format("{} tokens", tokens));
    EXPECT_TRUE(topk_matches_reference_twice(layer, ex, cfg, tokens, seed + 11 + static_cast<std::uint64_t>(tokens)));
  }
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [scheme, strategy] = info.param;
  return fmt::format("{}_{}_{}", scheme.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4",
                     scheme.w4a16() ? "W4A16" : "W4A4", strategy);
}

// Both weight formats, both activation kinds (W4A4 quantizes the activation's output for FC2).
const QuantScheme kSchemes[] = {{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                {WeightFormat::mxfp4, Activations::bf16}};

INSTANTIATE_TEST_SUITE_P(All, MoeActivationSchemes,
                         ::testing::Combine(::testing::ValuesIn(kSchemes),
                                            ::testing::Values("grouped", "decode", "split", "mma")),
                         name);

// gpt-oss's parameters, and biases with the plain SwiGLU, on the device's automatic strategy.
TEST(MoeActivation, GptOssAndBiasesAloneMatchReference) {
  for (const bool gpt_oss : {true, false}) {
    SCOPED_TRACE(gpt_oss ? "gpt-oss" : "biases with SwiGLU");
    const QuantScheme scheme{WeightFormat::nvfp4, gpt_oss ? Activations::bf16 : Activations::fp4_dynamic};
    Fp4Experts ex = make_experts({scheme.weight, kExperts, kHidden, kInter, Data::exact, 21});
    add_biases(ex, 22);
    MoeConfig cfg;
    cfg.scheme = scheme;
    cfg.top_k = kTopK;
    if (gpt_oss) cfg.activation = MoeActivation::gpt_oss();
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    EXPECT_TRUE(topk_matches_reference_twice(layer, ex, cfg, 5, 23));
  }
}

// One token at gpt-oss-20b's expert shape (H = I = 2880, top 4; 4 experts stand for its 32): the
// one-token mma kernels split K = 2880 over 9 warps, and under W4A4 FC1 takes as many row tiles as
// fit the device's work-group maximum (4 would be 1152 work-items: an H200 refused that launch
// before mma_pair_fc1_row_tiles). The device's automatic strategy (mma on NVIDIA GPUs); mma
// forced only where it runs natively (its emulation on a CPU takes most of a minute here).
TEST(MoeActivation, GptOssShapeOneTokenMatchesReference) {
  constexpr std::int64_t kGptOssExperts = 4, kGptOssSize = 2880;
  for (const QuantScheme scheme : {QuantScheme{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                   QuantScheme{WeightFormat::mxfp4, Activations::fp4_dynamic}}) {
    SCOPED_TRACE(scheme.name());
    Fp4Experts ex = make_experts({scheme.weight, kGptOssExperts, kGptOssSize, kGptOssSize, Data::exact, 31});
    add_biases(ex, 32);
    for (const std::string strategy : {"", "mma"}) {
      if (strategy == "mma" && !mma_native(test_context().info())) continue;
      SCOPED_TRACE(strategy.empty() ? "automatic" : strategy);
      MoeConfig cfg;
      cfg.scheme = scheme;
      cfg.top_k = 4;
      cfg.kernel = strategy;
      cfg.activation = MoeActivation::gpt_oss();
      MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
      EXPECT_TRUE(topk_matches_reference_twice(layer, ex, cfg, 1, 33));
    }
  }
}

// The tests above can fail: with these data the clamps and the biases move the outputs far
// beyond the reference's bounds (the reference computes them; the layer is checked against it).
TEST(MoeActivation, ClampsAndBiasesChangeTheOutputBeyondTheBound) {
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::bf16};
  Fp4Experts plain = make_experts({scheme.weight, kExperts, kHidden, kInter, Data::exact, 3});
  Fp4Experts biased = plain;
  add_biases(biased, 10);
  const std::int64_t tokens = 5;
  const auto x = make_activations(tokens, kHidden, Data::exact, 4);
  const auto ids = make_ids(tokens, kTopK, kExperts, 5);
  const auto w = make_weights(tokens, kTopK, 6);
  const auto routing = reference::routing_from_topk(ids, w, tokens, kTopK);
  reference::MoeReferenceOptions swiglu, clamp1, clamp7;
  swiglu.scheme = clamp1.scheme = clamp7.scheme = scheme;
  clamp1.activation = clamped(1.0f);
  clamp7.activation = MoeActivation::gpt_oss();
  const auto base = reference::moe_reference(plain, swiglu, x, routing);
  // The fraction of outputs whose intervals do not overlap the base's.
  const auto apart = [&](const reference::MoeReferenceResult& r) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < r.value.size(); ++i)
      if (std::fabs(r.value[i] - base.value[i]) > r.bound[i] + base.bound[i]) ++n;
    return static_cast<double>(n) / static_cast<double>(r.value.size());
  };
  EXPECT_GT(apart(reference::moe_reference(biased, swiglu, x, routing)), 0.9);
  EXPECT_GT(apart(reference::moe_reference(plain, clamp1, x, routing)), 0.9);
  EXPECT_GT(apart(reference::moe_reference(plain, clamp7, x, routing)), 0.5);
  EXPECT_GT(apart(reference::moe_reference(biased, clamp7, x, routing)), 0.9);
}

// Bad biases and activation parameters are refused by name, by the layer and the reference alike.
TEST(MoeActivation, BadBiasesAndParametersAreRefusedByName) {
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::bf16};
  const Fp4Experts good = make_experts({scheme.weight, 4, 64, 64, Data::exact, 1});
  MoeConfig cfg;
  cfg.scheme = scheme;
  cfg.top_k = 2;
  const auto refused = [&](const Fp4Experts& ex, const MoeConfig& c, const std::string& expected) {
    try {
      MoeLayer::create(test_context(), ex, c);
      ADD_FAILURE() << "accepted; expected an error naming " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    reference::MoeReferenceOptions o = reference_options(c);
    try {
      reference::moe_reference(ex, o, make_activations(1, 64, Data::exact, 1),
                               reference::routing_from_topk({0, 1}, {0.5f, 0.5f}, 1, 2));
      ADD_FAILURE() << "the reference accepted; expected an error naming " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  Fp4Experts ex = good;
  add_biases(ex, 2);
  {
    Fp4Experts b = ex;
    b.w2_bias.clear();
    refused(b, cfg, "give both biases or neither");
  }
  {
    Fp4Experts b = ex;
    b.w13_bias.pop_back();
    refused(b, cfg, "w13_bias has 511 elements, expected 512 ([E, 2I])");
  }
  {
    Fp4Experts b = ex;
    b.w2_bias.push_back(0.0f);
    refused(b, cfg, "w2_bias has 257 elements, expected 256 ([E, H])");
  }
  {
    Fp4Experts b = ex;
    b.w2_bias[2 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
    refused(b, cfg, "w2_bias[2, 5] = nan: a bias must be finite");
  }
  {
    Fp4Experts b = ex;
    b.w13_bias[3 * 128 + 100] = std::numeric_limits<float>::infinity();
    refused(b, cfg, "w13_bias[3, 100] = inf: a bias must be finite");
  }
  for (const float alpha : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    MoeConfig c = cfg;
    c.activation = {MoeActivation::Kind::swiglu_clamped, alpha, 7.0f};
    refused(good, c, "the clamped SwiGLU's alpha");
  }
  for (const float limit : {0.0f, std::numeric_limits<float>::infinity()}) {
    MoeConfig c = cfg;
    c.activation = {MoeActivation::Kind::swiglu_clamped, 1.702f, limit};
    refused(good, c, "the clamped SwiGLU's limit");
  }
}

}  // namespace
}  // namespace fp4cl::test
