// MoE layers: [gate; up] stacking, gate and up global scales kept apart, per-expert and shared
// activation scales (vLLM's max of ModelOpt input_scale / min of compressed-tensors
// input_global_scale), and the ways of naming a layer to load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};

float stored_f32(const FixtureCheckpoint& f, const std::string& name) {
  float v;
  std::memcpy(&v, f.tensors.at(name).bytes.data(), 4);
  return v;
}

class MoeLoad : public testing::TestWithParam<Layout> {
 protected:
  Checkpoint open(const FixtureCheckpoint& f) {
    f.write(dir_.path());
    return Checkpoint::open(dir_.path());
  }
  TempDir dir_;
};

TEST_P(MoeLoad, GateRowsPrecedeUpRowsPerExpert) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 1, 4));
  const Fp4Experts x = open(f).load_moe("model.layers.0.mlp.experts").experts;
  const std::size_t half = static_cast<std::size_t>(x.intermediate * x.hidden / 2);
  for (std::int64_t e = 0; e < x.num_experts; ++e) {
    const auto& gate = f.expected(expert_module(ExpertStyle::qwen3, "model.layers.0", e, 0)).weight.packed;
    const auto& up = f.expected(expert_module(ExpertStyle::qwen3, "model.layers.0", e, 1)).weight.packed;
    const auto first = x.w13_packed.begin() + static_cast<std::ptrdiff_t>(2 * half * static_cast<std::size_t>(e));
    EXPECT_TRUE(std::equal(gate.begin(), gate.end(), first)) << "expert " << e;
    EXPECT_TRUE(std::equal(up.begin(), up.end(), first + static_cast<std::ptrdiff_t>(half))) << "expert " << e;
  }
}

TEST_P(MoeLoad, UnequalGateAndUpGlobalScalesAreKeptExactly) {
  FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 1, 4));
  // The calibrated fixture already differs per projection; make expert 2's differ by a lot.
  const std::string gate = expert_module(ExpertStyle::qwen3, "model.layers.0", 2, 0);
  const std::string up = expert_module(ExpertStyle::qwen3, "model.layers.0", 2, 1);
  const float gate_stored = stored_f32(f, f.global_scale_name(gate));
  f.set_f32(f.global_scale_name(up), gate_stored * 3.0f);
  const Fp4Experts x = open(f).load_moe("model.layers.0.mlp.experts").experts;
  ASSERT_EQ(x.w13_global_scale.size(), 8u);
  int differing = 0;
  for (std::int64_t e = 0; e < 4; ++e) {
    for (int p = 0; p < 2; ++p) {
      const std::string m = expert_module(ExpertStyle::qwen3, "model.layers.0", e, p);
      const float stored = stored_f32(f, f.global_scale_name(m));
      const float dequant = GetParam() == Layout::modelopt ? stored : 1.0f / stored;
      EXPECT_EQ(bits(x.w13_global_scale[static_cast<std::size_t>(2 * e + p)]), bits(dequant)) << m;
    }
    differing +=
        x.w13_global_scale[static_cast<std::size_t>(2 * e)] != x.w13_global_scale[static_cast<std::size_t>(2 * e + 1)];
  }
  EXPECT_EQ(differing, 4);
  // The block scales are not rescaled to a common global scale: they are the stored bytes.
  EXPECT_EQ(x.w13_scales, expected_experts(f, f.spec().moes[0]).w13_scales);
}

TEST_P(MoeLoad, PerExpertInputScalesTakeTheWiderOfGateAndUp) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 1, 4));
  const Fp4Experts x = open(f).load_moe(std::size_t{0}).experts;
  for (std::int64_t e = 0; e < 4; ++e) {
    const float g = stored_f32(f, f.input_scale_name(expert_module(ExpertStyle::qwen3, "model.layers.0", e, 0)));
    const float u = stored_f32(f, f.input_scale_name(expert_module(ExpertStyle::qwen3, "model.layers.0", e, 1)));
    const float d = stored_f32(f, f.input_scale_name(expert_module(ExpertStyle::qwen3, "model.layers.0", e, 2)));
    if (GetParam() == Layout::modelopt) {  // stored gs_d: the max, kept exactly
      EXPECT_EQ(bits(x.w13_input_scale[static_cast<std::size_t>(e)]), bits(std::max(g, u)));
      EXPECT_EQ(bits(x.w13_input_global_scale[static_cast<std::size_t>(e)]), bits(1.0f / std::max(g, u)));
      EXPECT_EQ(bits(x.w2_input_scale[static_cast<std::size_t>(e)]), bits(d));
    } else {  // stored gs_q: the min, kept exactly
      EXPECT_EQ(bits(x.w13_input_global_scale[static_cast<std::size_t>(e)]), bits(std::min(g, u)));
      EXPECT_EQ(bits(x.w13_input_scale[static_cast<std::size_t>(e)]), bits(1.0f / std::min(g, u)));
      EXPECT_EQ(bits(x.w2_input_global_scale[static_cast<std::size_t>(e)]), bits(d));
    }
    if (e % 2 == 1) {
      EXPECT_NE(g, u) << "the fixture's odd experts calibrate gate and up apart";
    }
  }
}

TEST_P(MoeLoad, SharedInputScalesAreTheWidestOverAllExperts) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 1, 6));
  const Checkpoint ckpt = open(f);
  const Fp4Experts shared = ckpt.load_moe("model.layers.0", {ExpertInputScales::shared}).experts;
  const Fp4Experts own = ckpt.load_moe("model.layers.0", {ExpertInputScales::per_expert}).experts;
  const float start = GetParam() == Layout::modelopt ? 0.0f : std::numeric_limits<float>::infinity();
  float fc1 = start, fc2 = start;
  for (std::int64_t e = 0; e < 6; ++e) {
    for (int p = 0; p < 3; ++p) {
      const float v = stored_f32(f, f.input_scale_name(expert_module(ExpertStyle::qwen3, "model.layers.0", e, p)));
      float& acc = p < 2 ? fc1 : fc2;
      acc = GetParam() == Layout::modelopt ? std::max(acc, v) : std::min(acc, v);
    }
  }
  const auto& stored_fc1 = GetParam() == Layout::modelopt ? shared.w13_input_scale : shared.w13_input_global_scale;
  const auto& stored_fc2 = GetParam() == Layout::modelopt ? shared.w2_input_scale : shared.w2_input_global_scale;
  EXPECT_EQ(bits(stored_fc1), bits(std::vector<float>(6, fc1)));
  EXPECT_EQ(bits(stored_fc2), bits(std::vector<float>(6, fc2)));
  EXPECT_EQ(bits(shared.w13_input_global_scale), bits(std::vector<float>(6, 1.0f / shared.w13_input_scale[0])));
  // Everything else is the per-expert load's.
  EXPECT_EQ(shared.w13_packed, own.w13_packed);
  EXPECT_EQ(bits(shared.w13_global_scale), bits(own.w13_global_scale));
  EXPECT_NE(bits(shared.w13_input_scale), bits(own.w13_input_scale));
}

TEST_P(MoeLoad, W4A16ExpertsHaveUnitActivationScales) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4A16, 1, 4));
  const Fp4Experts x = open(f).load_moe("model.layers.0").experts;
  const std::vector<float> ones(4, 1.0f);
  EXPECT_EQ(x.w13_input_global_scale, ones);
  EXPECT_EQ(x.w2_input_global_scale, ones);
  EXPECT_EQ(x.w13_input_scale, ones);
  EXPECT_EQ(x.w2_input_scale, ones);
}

TEST_P(MoeLoad, LayersAreNamedByNamePrefixOrIndex) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 3, 2));
  const Checkpoint ckpt = open(f);
  ASSERT_EQ(ckpt.moe_layers().size(), 3u);
  EXPECT_EQ(ckpt.moe_layers()[2].name, "model.layers.2.mlp.experts");
  const Fp4Experts by_name = ckpt.load_moe("model.layers.2.mlp.experts").experts;
  expect_experts_equal(ckpt.load_moe("model.layers.2").experts, by_name);
  expect_experts_equal(ckpt.load_moe(std::size_t{2}).experts, by_name);
  expect_error([&] { ckpt.load_moe(std::size_t{3}); }, {"MoE layer index 3 is out of range", "3 MoE layers"});
  expect_error([&] { ckpt.load_moe("model.layers.7"); }, {"no MoE layer 'model.layers.7'"});
  expect_error([&] { ckpt.load_linear("model.layers.1.mlp.experts"); }, {"is an MoE layer", "load_moe"});
  expect_error([&] { ckpt.load_linear("model.layers.1.mlp.gate"); },
               {"no quantized linear module 'model.layers.1.mlp.gate'", "not quantized"});
  expect_error([&] { ckpt.layer("nope"); }, {"no quantized layer 'nope'"});
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, MoeLoad, testing::Values(Layout::modelopt, Layout::compressed_tensors),
                         [](const testing::TestParamInfo<Layout>& i) {
                           return std::string(i.param == Layout::modelopt ? "ModelOpt" : "CompressedTensors");
                         });

}  // namespace
}  // namespace fp4cl::test
