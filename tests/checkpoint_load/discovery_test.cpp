// Discovery: expert naming conventions, natural layer order, unquantized tensors left alone,
// mixed-precision checkpoints (FP8 layers listed as unsupported, FP4 layers loaded), and configs
// that disagree with the tensors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/expert_naming.hpp"
#include "checkpoint/module_names.hpp"
#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};

TEST(ExpertNaming, RecognizesQwen3AndDeepSeekNames) {
  const auto n = detail::parse_expert_module("model.layers.12.mlp.experts.127.down_proj");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->layer, "model.layers.12.mlp.experts");
  EXPECT_EQ(n->prefix, "model.layers.12");
  EXPECT_EQ(n->expert, 127);
  EXPECT_EQ(n->projection, detail::ExpertProjection::down);
  EXPECT_EQ(n->naming->convention, "Qwen3-MoE / DeepSeek");
  EXPECT_EQ(n->naming->module(n->layer, 3, detail::ExpertProjection::up), "model.layers.12.mlp.experts.3.up_proj");
}

TEST(ExpertNaming, RecognizesMixtralNames) {
  const std::pair<const char*, detail::ExpertProjection> cases[] = {{"w1", detail::ExpertProjection::gate},
                                                                    {"w3", detail::ExpertProjection::up},
                                                                    {"w2", detail::ExpertProjection::down}};
  for (const auto& [suffix, projection] : cases) {
    const auto n = detail::parse_expert_module(std::string("model.layers.0.block_sparse_moe.experts.5.") + suffix);
    ASSERT_TRUE(n) << suffix;
    EXPECT_EQ(n->layer, "model.layers.0.block_sparse_moe.experts");
    EXPECT_EQ(n->prefix, "model.layers.0");
    EXPECT_EQ(n->expert, 5);
    EXPECT_EQ(n->projection, projection);
    EXPECT_EQ(n->naming->convention, "Mixtral");
  }
}

TEST(ExpertNaming, LeavesOtherModulesAlone) {
  for (const char* m : {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.shared_experts.gate_proj",
                        "model.layers.0.mlp.experts.x.gate_proj", "model.layers.0.mlp.experts.3.w1",
                        "model.layers.0.block_sparse_moe.experts.3.gate_proj", "model.layers.0.mlp.myexperts.3.up_proj",
                        "model.layers.0.self_attn.q_proj", "lm_head", "experts.0.gate_proj"}) {
    EXPECT_FALSE(detail::parse_expert_module(m)) << m;
  }
  const auto bare = detail::parse_expert_module("mlp.experts.3.up_proj");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->prefix, "");
  expect_error([] { detail::parse_expert_module("model.layers.0.mlp.experts.99999999.up_proj"); },
               {"expert index 99999999", "1048576"});
}

TEST(ModuleNames, NaturalOrderAndLayerNumbers) {
  EXPECT_TRUE(detail::natural_less("model.layers.2.x", "model.layers.10.x"));
  EXPECT_FALSE(detail::natural_less("model.layers.10.x", "model.layers.2.x"));
  EXPECT_TRUE(detail::natural_less("a.1", "a.01"));
  EXPECT_TRUE(detail::natural_less("a", "a.0"));
  EXPECT_FALSE(detail::natural_less("a.b", "a.b"));
  const detail::NumberedName n = detail::split_layer_number("model.layers.12.mlp.experts");
  EXPECT_EQ(n.pattern, "model.layers.{}.mlp.experts");
  EXPECT_EQ(n.number, 12);
  EXPECT_FALSE(detail::split_layer_number("lm_head").number);
  EXPECT_EQ(detail::split_layer_number("lm_head").pattern, "lm_head");
  EXPECT_EQ(detail::beside_experts("model.layers.3.mlp.experts", "shared_experts"), "model.layers.3.mlp.shared_experts");
  EXPECT_EQ(detail::beside_experts("experts", "gate.e_score_correction_bias"), "gate.e_score_correction_bias");
}

class Discovery : public testing::Test {
 protected:
  Checkpoint open(const FixtureCheckpoint& f) {
    f.write(dir_.path());
    return Checkpoint::open(dir_.path());
  }
  TempDir dir_;
};

TEST_F(Discovery, LayersComeInNaturalOrderWithoutUnquantizedTensors) {
  const FixtureCheckpoint f = FixtureCheckpoint::build(dense_model(Layout::modelopt, kNvfp4, 11, 32, 32));
  const Checkpoint ckpt = open(f);
  ASSERT_EQ(ckpt.layers().size(), 77u);
  EXPECT_EQ(ckpt.layers()[0].name, "model.layers.0.mlp.down_proj");
  EXPECT_EQ(ckpt.layers()[7 * 2].name, "model.layers.2.mlp.down_proj");
  EXPECT_EQ(ckpt.layers()[7 * 10].name, "model.layers.10.mlp.down_proj");
  EXPECT_EQ(ckpt.quantized_modules().size(), 77u);
  for (const CheckpointLayer& l : ckpt.layers()) {
    EXPECT_EQ(l.name.find("norm"), std::string::npos);
    EXPECT_EQ(l.name.find("embed"), std::string::npos);
    EXPECT_NE(l.name, "lm_head");
  }
  // A BF16 module the config does not exclude is simply not a quantized linear.
  expect_error([&] { ckpt.load_linear("model.layers.0.input_layernorm"); },
               {"no quantized linear module 'model.layers.0.input_layernorm'", "is BF16 [32]", "not packed FP4"});
}

TEST_F(Discovery, DenseAndMoeLayersTogether) {
  // DeepSeek-like: layer 0 has a dense MLP, layer 1 routed experts.
  ModelSpec spec = moe_model(Layout::compressed_tensors, kNvfp4, 2, 4);
  spec.moes.erase(spec.moes.begin());
  spec.linears.push_back({"model.layers.0.mlp.gate_proj", 32, 64});
  spec.linears.push_back({"model.layers.0.mlp.up_proj", 32, 64});
  spec.linears.push_back({"model.layers.0.mlp.down_proj", 64, 32});
  const FixtureCheckpoint f = FixtureCheckpoint::build(spec);
  const Checkpoint ckpt = open(f);
  ASSERT_EQ(ckpt.moe_layers().size(), 1u);
  EXPECT_EQ(ckpt.moe_layers()[0].name, "model.layers.1.mlp.experts");
  EXPECT_EQ(ckpt.layer("model.layers.0.mlp.gate_proj").kind, LayerKind::linear);
  expect_weight_matches(ckpt.load_linear("model.layers.0.mlp.down_proj").weight, f, "model.layers.0.mlp.down_proj");
  expect_experts_equal(ckpt.load_moe("model.layers.1").experts, expected_experts(f, spec.moes[0]));
}

// A ModelOpt MIXED_PRECISION export: FP8 attention, NVFP4 experts, W4A16 o_proj (still carrying
// its calibrated input_scale, as mixed exports do).
class MixedPrecision : public Discovery {
 protected:
  FixtureCheckpoint mixed(const nlohmann::json& expert_entries) {
    FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(Layout::modelopt, kNvfp4, 1, 4));
    const std::string q = "model.layers.0.self_attn.q_proj";
    f.tensors.erase(f.global_scale_name(q));
    f.tensors.at(q + ".weight") = {Dtype::f8_e4m3, {64, 64}, std::vector<std::uint8_t>(64 * 64, 0x38)};
    f.tensors.at(q + ".weight_scale") = {Dtype::f32, {}, {0, 0, 128, 63}};
    nlohmann::json layers = {{q, {{"quant_algo", "FP8"}}},
                             {"model.layers.0.self_attn.k_proj", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
                             {"model.layers.0.self_attn.v_proj", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
                             {"model.layers.0.self_attn.o_proj", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}}};
    layers.update(expert_entries);
    f.files["hf_quant_config.json"] = nlohmann::json{
        {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
        {"quantization",
         {{"quant_algo", "MIXED_PRECISION"},
          {"kv_cache_quant_algo", nullptr},
          {"quantized_layers", layers}}}}.dump(2);
    nlohmann::json config = nlohmann::json::parse(f.files["config.json"]);
    config.erase("quantization_config");
    f.files["config.json"] = config.dump(2);
    return f;
  }
};

TEST_F(MixedPrecision, Fp8LayersAreListedAndFp4LayersLoad) {
  const FixtureCheckpoint f = mixed({{"model.layers.0.mlp.experts", {{"quant_algo", "NVFP4"}, {"group_size", 16}}}});
  const Checkpoint ckpt = open(f);
  ASSERT_EQ(ckpt.unsupported_modules().size(), 1u);
  EXPECT_EQ(ckpt.unsupported_modules()[0].module, "model.layers.0.self_attn.q_proj");
  EXPECT_NE(ckpt.unsupported_modules()[0].reason.find("FP8"), std::string::npos);
  expect_error([&] { ckpt.load_linear("model.layers.0.self_attn.q_proj"); },
               {"cannot load module 'model.layers.0.self_attn.q_proj'", "FP8"});
  EXPECT_EQ(ckpt.layer("model.layers.0.self_attn.k_proj").scheme, kNvfp4);
  const LoadedLinear o = ckpt.load_linear("model.layers.0.self_attn.o_proj");
  EXPECT_EQ(o.scheme, kNvfp4A16);
  EXPECT_EQ(o.weight.input_global_scale, 1.0f);
  EXPECT_EQ(o.weight.input_scale, 1.0f);
  EXPECT_EQ(o.weight.packed, f.expected("model.layers.0.self_attn.o_proj").weight.packed);
  expect_experts_equal(ckpt.load_moe("model.layers.0").experts, expected_experts(f, f.spec().moes[0]));

  const CheckpointReport report = inspect_checkpoint(ckpt);
  ASSERT_EQ(report.unsupported.size(), 1u);
  bool fp8_warning = false, ignored_warning = false;
  for (const std::string& w : report.warnings) {
    fp8_warning = fp8_warning || w.find("cannot be run by fp4cl") != std::string::npos;
    ignored_warning =
        ignored_warning || (w.find("o_proj") != std::string::npos && w.find("ignored") != std::string::npos);
  }
  EXPECT_TRUE(fp8_warning);
  EXPECT_TRUE(ignored_warning);
}

TEST_F(MixedPrecision, ExpertsOfOneLayerMustShareOneScheme) {
  nlohmann::json entries;
  for (int e = 0; e < 4; ++e) {
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      entries["model.layers.0.mlp.experts." + std::to_string(e) + "." + p] = {
          {"quant_algo", e == 2 ? "W4A16_NVFP4" : "NVFP4"}, {"group_size", 16}};
    }
  }
  const FixtureCheckpoint f = mixed(entries);
  expect_error([&] { open(f); }, {"MoE layer 'model.layers.0.mlp.experts'", "experts.2.gate_proj' is NVFP4 W4A16",
                                  "experts.0.gate_proj' is NVFP4 W4A4", "one scheme for all experts"});
}

TEST_F(MixedPrecision, AnExpertThatCannotRunRefusesTheLayer) {
  nlohmann::json entries = {{"model.layers.0.mlp.experts", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
                            {"model.layers.0.mlp.experts.1.down_proj", {{"quant_algo", "FP8"}}}};
  const FixtureCheckpoint f = mixed(entries);
  expect_error([&] { open(f); },
               {"MoE layer 'model.layers.0.mlp.experts'", "expert 1's down projection", "FP8", "quantized as a whole"});
}

// compressed-tensors config ignores a module the checkpoint stores packed: listed, not loadable.
TEST_F(Discovery, ConfigLeavingAPackedModuleUnquantized) {
  FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(Layout::compressed_tensors, kNvfp4, 1, 2));
  nlohmann::json config = nlohmann::json::parse(f.files["config.json"]);
  config["quantization_config"]["ignore"].push_back("model.layers.0.self_attn.k_proj");
  f.files["config.json"] = config.dump(2);
  const Checkpoint ckpt = open(f);
  ASSERT_EQ(ckpt.unsupported_modules().size(), 1u);
  EXPECT_EQ(ckpt.unsupported_modules()[0].module, "model.layers.0.self_attn.k_proj");
  expect_error([&] { ckpt.load_linear("model.layers.0.self_attn.k_proj"); },
               {"leaves it unquantized", "ignore entry 'model.layers.0.self_attn.k_proj'",
                "model.layers.0.self_attn.k_proj.weight_packed"});
  EXPECT_NO_THROW(ckpt.load_linear("model.layers.0.self_attn.q_proj"));
}

TEST_F(Discovery, NotADirectory) {
  expect_error([&] { Checkpoint::open(dir_.path() / "missing"); }, {"does not exist or is not a directory"});
  expect_error([&] { Checkpoint::open(dir_.path()); }, {"neither config.json nor hf_quant_config.json"});
}

}  // namespace
}  // namespace fp4cl::test
