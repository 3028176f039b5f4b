// Every scheme in every layout that writes it — ModelOpt NVFP4 W4A4 / W4A16, compressed-tensors
// NVFP4 W4A4 / W4A16 and MXFP4 W4A4 / W4A16 — loads to exactly what the fixture quantized: the
// layer list, every linear module and every MoE layer, bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};
constexpr QuantScheme kMxfp4{WeightFormat::mxfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4A16{WeightFormat::mxfp4, Activations::bf16};

struct SchemeCase {
  Layout layout;
  QuantScheme scheme;
};
void PrintTo(const SchemeCase& c, std::ostream* os) { *os << to_string(c.layout) << " " << c.scheme.name(); }

std::string case_name(const testing::TestParamInfo<SchemeCase>& info) {
  std::string name = std::string(info.param.layout == Layout::modelopt ? "ModelOpt_" : "CompressedTensors_") +
                     info.param.scheme.name();
  for (char& c : name) {
    if (c == ' ') c = '_';
  }
  return name;
}

class LoadSchemes : public testing::TestWithParam<SchemeCase> {};

// Loads every layer of `f` written to a fresh directory and checks it against the fixture.
void check_loads_exactly(const FixtureCheckpoint& f, std::uint64_t max_shard_bytes = 0) {
  TempDir dir;
  f.write(dir.path(), max_shard_bytes);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  const ModelSpec& s = f.spec();
  EXPECT_EQ(ckpt.config().producer(),
            s.layout == Layout::modelopt ? QuantProducer::modelopt : QuantProducer::compressed_tensors);

  // The layer list: one entry per linear and per MoE layer, in model order.
  std::vector<std::string> expected_names;
  for (const LinearSpec& l : s.linears) expected_names.push_back(l.module);
  for (const MoeSpec& m : s.moes) expected_names.push_back(moe_layer_name(s.expert_style, m.prefix));
  std::vector<std::string> names;
  for (const CheckpointLayer& l : ckpt.layers()) {
    names.push_back(l.name);
    EXPECT_EQ(l.scheme, s.scheme) << l.name;
  }
  std::sort(expected_names.begin(), expected_names.end());
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, expected_names);
  EXPECT_TRUE(ckpt.unsupported_modules().empty());

  for (const LinearSpec& l : s.linears) {
    const CheckpointLayer& layer = ckpt.layer(l.module);
    EXPECT_EQ(layer.kind, LayerKind::linear);
    EXPECT_EQ(layer.out_features, l.out_features);
    EXPECT_EQ(layer.in_features, l.in_features);
    const LoadedLinear loaded = ckpt.load_linear(l.module);
    EXPECT_EQ(loaded.scheme, s.scheme);
    expect_weight_matches(loaded.weight, f, l.module);
  }
  for (const MoeSpec& m : s.moes) {
    const std::string name = moe_layer_name(s.expert_style, m.prefix);
    const CheckpointLayer& layer = ckpt.layer(name);
    EXPECT_EQ(layer.kind, LayerKind::moe);
    EXPECT_EQ(layer.num_experts, m.experts);
    EXPECT_EQ(layer.hidden, m.hidden);
    EXPECT_EQ(layer.intermediate, m.intermediate);
    EXPECT_EQ(layer.expert_naming, s.expert_style == ExpertStyle::qwen3 ? "Qwen3-MoE / DeepSeek" : "Mixtral");
    const LoadedExperts loaded = ckpt.load_moe(name);
    EXPECT_EQ(loaded.scheme, s.scheme);
    SCOPED_TRACE(name);
    expect_experts_equal(loaded.experts, expected_experts(f, m));
    // An expert projection also loads on its own, as a linear module.
    expect_weight_matches(ckpt.load_linear(expert_module(s.expert_style, m.prefix, 1, 2)).weight, f,
                          expert_module(s.expert_style, m.prefix, 1, 2));
  }
}

TEST_P(LoadSchemes, MoeModelLoadsBitExact) {
  check_loads_exactly(FixtureCheckpoint::build(moe_model(GetParam().layout, GetParam().scheme, 2, 4)));
}

TEST_P(LoadSchemes, MixtralNamingLoadsBitExact) {
  check_loads_exactly(
      FixtureCheckpoint::build(moe_model(GetParam().layout, GetParam().scheme, 1, 4, 64, 64, ExpertStyle::mixtral)));
}

TEST_P(LoadSchemes, DenseModelLoadsBitExact) {
  check_loads_exactly(FixtureCheckpoint::build(dense_model(GetParam().layout, GetParam().scheme, 2)));
}

TEST_P(LoadSchemes, ShardedModelLoadsBitExact) {
  check_loads_exactly(FixtureCheckpoint::build(moe_model(GetParam().layout, GetParam().scheme, 2, 4)), 8192);
}

// The fixture exercises what real checkpoints contain: negative-zero codes and zero block scales.
TEST_P(LoadSchemes, FixtureHoldsNegativeZeroCodesAndZeroBlockScales) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(dense_model(GetParam().layout, GetParam().scheme, 1));
  const ExpectedModule& e = f.expected("model.layers.0.self_attn.q_proj");
  bool negative_zero = false, zero_scale = false;
  for (std::uint8_t b : e.weight.packed) negative_zero = negative_zero || (b & 0xF) == 0x8 || (b >> 4) == 0x8;
  for (std::uint8_t s : e.weight.scales) zero_scale = zero_scale || s == 0;
  EXPECT_TRUE(negative_zero);
  EXPECT_TRUE(zero_scale);
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, LoadSchemes,
                         testing::Values(SchemeCase{Layout::modelopt, kNvfp4}, SchemeCase{Layout::modelopt, kNvfp4A16},
                                         SchemeCase{Layout::compressed_tensors, kNvfp4},
                                         SchemeCase{Layout::compressed_tensors, kNvfp4A16},
                                         SchemeCase{Layout::compressed_tensors, kMxfp4},
                                         SchemeCase{Layout::compressed_tensors, kMxfp4A16}),
                         case_name);

// ModelOpt exports without the config.json copy of the quantization config load the same.
TEST(LoadModelOpt, HfQuantConfigAlone) {
  ModelSpec spec = moe_model(Layout::modelopt, kNvfp4, 1, 4);
  spec.modelopt_config_json = false;
  check_loads_exactly(FixtureCheckpoint::build(spec));
}

}  // namespace
}  // namespace fp4cl::test
