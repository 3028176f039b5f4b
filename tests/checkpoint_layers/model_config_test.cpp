// config.json's routing facts (ModelConfig), the MoeConfig a checkpoint's MoE layer gets from
// them, and the errors of the from_checkpoint calls.
#include "fp4cl/model_config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/moe_reference.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};

void write_config(const std::filesystem::path& dir, const std::string& text) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << text;
}

// A copy of the NVFP4 W4A4 compressed-tensors checkpoint whose config.json `edit` changes.
std::filesystem::path edited_checkpoint(const TempDir& scratch, const std::function<void(nlohmann::json&)>& edit) {
  const std::filesystem::path from = quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}});
  const std::filesystem::path to = scratch.path() / "model";
  std::filesystem::copy(from, to);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(to / "config.json"));
  edit(config);
  std::ofstream(to / "config.json") << config.dump(2);
  return to;
}

TEST(ModelConfig, ReadsTheQuantizedModelsRouting) {
  const ModelConfig c = ModelConfig::load(quantized_model({QuantProducer::modelopt, kNvfp4, {}}));
  EXPECT_NE(c.source.find("config.json"), std::string::npos);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.experts_per_token, 2);
  EXPECT_EQ(c.norm_topk_prob, true);
  EXPECT_EQ(c.renormalize(), true);
  EXPECT_TRUE(c.softmax_routing());
}

TEST(ModelConfig, DefaultsNestingAndErrors) {
  TempDir dir;
  const ModelConfig none = ModelConfig::load(dir.path());
  EXPECT_TRUE(none.source.empty());
  EXPECT_FALSE(none.experts_per_token || none.renormalize());

  write_config(dir.path(), R"({"model_type": "mixtral", "num_experts_per_tok": 2})");
  EXPECT_EQ(ModelConfig::load(dir.path()).renormalize(), true);  // Mixtral always renormalizes
  write_config(dir.path(), R"({"model_type": "qwen3_moe", "num_experts_per_tok": 8})");
  EXPECT_EQ(ModelConfig::load(dir.path()).renormalize(), false);  // transformers' Qwen3MoeConfig default
  write_config(dir.path(), R"({"model_type": "something_new", "num_experts_per_tok": 8})");
  EXPECT_FALSE(ModelConfig::load(dir.path()).renormalize());
  write_config(dir.path(), R"({"model_type": "llava", "text_config": {"model_type": "mixtral",
      "num_experts_per_tok": 4, "norm_topk_prob": false}})");
  const ModelConfig nested = ModelConfig::load(dir.path());
  EXPECT_EQ(nested.model_type, "llava");
  EXPECT_EQ(nested.experts_per_token, 4);
  EXPECT_EQ(nested.renormalize(), false);  // stated beats the model type's default
  write_config(dir.path(), R"({"scoring_func": "sigmoid", "num_experts_per_tok": 8})");
  EXPECT_FALSE(ModelConfig::load(dir.path()).softmax_routing());
  for (const char* bad : {R"({"n_group": 0})", R"({"topk_group": -2})", R"({"n_group": 1.5})"}) {
    write_config(dir.path(), bad);
    EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("must be a"), std::string::npos) << bad;
  }
  write_config(dir.path(), R"({"routed_scaling_factor": 0})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); })
                .find("routed_scaling_factor must be a finite number > 0 (as a float), got 0"),
            std::string::npos);

  write_config(dir.path(), R"({"num_experts_per_tok": "8"})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("num_experts_per_tok must be an integer"),
            std::string::npos);
  write_config(dir.path(), R"({"num_experts_per_tok": 0})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("must be a positive integer, got 0"),
            std::string::npos);
  write_config(dir.path(), R"({"norm_topk_prob": 1})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("norm_topk_prob must be true or false, got number 1"),
            std::string::npos);
}

// gpt-oss's activation from config.json: model_type "gpt_oss" or a swiglu_limit.
TEST(MoeFromCheckpoint, GptOssConfigChoosesTheClampedSwiglu) {
  TempDir dir;
  write_config(dir.path(), R"({"model_type": "gpt_oss", "num_experts_per_tok": 4, "swiglu_limit": 6.5})");
  const ModelConfig g = ModelConfig::load(dir.path());
  EXPECT_TRUE(g.clamped_swiglu());
  EXPECT_EQ(g.swiglu_limit, 6.5);
  write_config(dir.path(), R"({"swiglu_limit": -1})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("swiglu_limit must be a finite number > 0 (as a float), got -1"),
            std::string::npos);
  write_config(dir.path(), R"({"swiglu_limit": 1e39})");  // a double, but no float
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("swiglu_limit must be a finite number > 0 (as a float), got 1e+39"),
            std::string::npos);
  write_config(dir.path(), R"({"swiglu_limit": 3.4028234e38})");  // the largest float: allowed
  EXPECT_TRUE(ModelConfig::load(dir.path()).clamped_swiglu());
  write_config(dir.path(), R"({"swiglu_limit": "7"})");
  EXPECT_NE(error_of([&] { ModelConfig::load(dir.path()); }).find("swiglu_limit must be a number"), std::string::npos);

  TempDir a, b;
  const Checkpoint limited = Checkpoint::open(edited_checkpoint(a, [](nlohmann::json& c) { c["swiglu_limit"] = 5.0; }));
  MoeConfig config = MoeConfig::from_checkpoint(limited, "model.layers.0");
  EXPECT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
  EXPECT_EQ(config.activation.alpha, 1.702f);
  EXPECT_EQ(config.activation.limit, 5.0f);
  const Checkpoint typed = Checkpoint::open(edited_checkpoint(b, [](nlohmann::json& c) { c["model_type"] = "gpt_oss"; }));
  config = MoeConfig::from_checkpoint(typed, "model.layers.0");
  EXPECT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
  EXPECT_EQ(config.activation.limit, 7.0f);
  EXPECT_EQ(MoeConfig::from_checkpoint(Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}})),
                                       "model.layers.0")
                .activation.kind,
            MoeActivation::Kind::swiglu);
}

// DeepSeek's, Kimi-K2's and GLM-4.5's gates from config.json's keys.
TEST(ModelConfig, LogitRoutingOfTheModelFamilies) {
  TempDir dir;
  using S = MoeLogitRouting::Scoring;
  write_config(dir.path(), R"({"model_type": "deepseek_v3", "num_experts_per_tok": 8, "n_routed_experts": 256,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
      "routed_scaling_factor": 2.5})");
  ModelConfig c = ModelConfig::load(dir.path());
  MoeLogitRouting r = c.logit_routing();
  EXPECT_TRUE(r.unsupported.empty()) << r.unsupported;
  EXPECT_EQ(r.scoring, S::sigmoid);
  EXPECT_EQ(r.groups, 8);
  EXPECT_EQ(r.top_groups, 4);
  EXPECT_EQ(r.scaling_factor, 2.5f);
  EXPECT_TRUE(r.correction_bias.empty());  // a tensor: MoeLogitRouting::from_checkpoint reads it
  EXPECT_TRUE(c.router_correction_bias());
  EXPECT_EQ(c.renormalize(), true);  // DeepseekV3Config's default
  EXPECT_FALSE(c.softmax_routing());
  // Kimi-K2: one group.
  write_config(dir.path(), R"({"model_type": "kimi_k2", "scoring_func": "sigmoid", "topk_method": "noaux_tc",
      "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827})");
  r = ModelConfig::load(dir.path()).logit_routing();
  EXPECT_EQ(r.groups, 1);
  EXPECT_EQ(r.scaling_factor, 2.827f);
  // GLM-4.5 states neither scoring_func nor topk_method: its router is DeepSeek-V3's.
  write_config(dir.path(), R"({"model_type": "glm4_moe", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5})");
  c = ModelConfig::load(dir.path());
  EXPECT_EQ(c.logit_routing().scoring, S::sigmoid);
  EXPECT_TRUE(c.router_correction_bias());
  EXPECT_EQ(c.renormalize(), true);
  // DeepSeek-V2: softmax, groups ranked by their best expert, no bias; topk_group defaults to n_group.
  write_config(dir.path(), R"({"model_type": "deepseek_v2", "topk_method": "group_limited_greedy", "n_group": 8,
      "routed_scaling_factor": 16.0})");
  c = ModelConfig::load(dir.path());
  r = c.logit_routing();
  EXPECT_EQ(r.scoring, S::softmax);
  EXPECT_EQ(r.groups, 8);
  EXPECT_EQ(r.top_groups, 8);
  EXPECT_EQ(r.scaling_factor, 16.0f);
  EXPECT_FALSE(c.router_correction_bias());
  EXPECT_EQ(c.renormalize(), false);
  // "greedy": no groups whatever n_group says.
  write_config(dir.path(), R"({"topk_method": "greedy", "n_group": 8, "topk_group": 3})");
  EXPECT_TRUE(ModelConfig::load(dir.path()).logit_routing().plain_softmax());
  // What fp4cl does not compute is said, not guessed.
  write_config(dir.path(), R"({"scoring_func": "sqrtsoftplus"})");
  r = ModelConfig::load(dir.path()).logit_routing();
  EXPECT_NE(r.unsupported.find("scoring_func 'sqrtsoftplus' is neither softmax nor sigmoid"), std::string::npos)
      << r.unsupported;
  EXPECT_FALSE(r.plain_softmax());
  write_config(dir.path(), R"({"scoring_func": "sigmoid", "topk_method": "ranked_sampling"})");
  EXPECT_NE(ModelConfig::load(dir.path()).logit_routing().unsupported.find("topk_method 'ranked_sampling'"),
            std::string::npos);
}

TEST(MoeFromCheckpoint, DeepSeekGateRoutesOnTheDevice) {
  TempDir dir;
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  const Checkpoint ckpt = Checkpoint::open(deepseek_checkpoint(dir.path() / "model", &bias, Dtype::f32, {4}));
  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  EXPECT_EQ(config.logit_routing.scoring, MoeLogitRouting::Scoring::sigmoid);
  EXPECT_EQ(config.logit_routing.groups, 2);
  EXPECT_EQ(config.logit_routing.top_groups, 1);
  EXPECT_EQ(config.logit_routing.correction_bias, bias);
  EXPECT_EQ(config.logit_routing.scaling_factor, 2.5f);
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0");
  const std::int64_t T = 6;
  const std::vector<std::uint16_t> x = gaussian_bf16(T, 64, 3);
  const std::vector<float> logits = gaussian_logits(T, 4, 4);
  const MoeRun run = run_moe_logits(layer, config, x, logits, T);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  const auto routing = reference::routing_from_logits(logits, T, 4, config.top_k, true, config.logit_routing);
  ASSERT_FALSE(routing.ambiguous);
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0").experts, ro, x, routing);
  EXPECT_EQ(moe_outside_bound(ref, run, config.output, "deepseek gate"), 0u);
  // The same routing with softmax top-k would differ: the gate is what ran.
  const auto softmax = reference::routing_from_logits(logits, T, 4, config.top_k, true);
  EXPECT_NE(softmax.ids, routing.ids);
}

TEST(MoeFromCheckpoint, TheCorrectionBiasTensorIsChecked) {
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  {
    TempDir dir;  // BF16: widened exactly
    const Checkpoint ckpt = Checkpoint::open(deepseek_checkpoint(dir.path() / "model", &bias, Dtype::bf16, {4}));
    EXPECT_EQ(MoeLogitRouting::from_checkpoint(ckpt, "model.layers.0").correction_bias, bias);
  }
  {
    TempDir dir;  // absent: router logits refused naming the tensor; top-k ids still run
    const Checkpoint ckpt = Checkpoint::open(deepseek_checkpoint(dir.path() / "model", nullptr, Dtype::f32, {4}));
    const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
    EXPECT_NE(config.logit_routing.unsupported.find("no tensor 'model.layers.0.mlp.gate.e_score_correction_bias'"),
              std::string::npos)
        << config.logit_routing.unsupported;
    MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0");
    const std::string e = error_of([&] {
      run_moe_logits(layer, config, gaussian_bf16(1, 64, 5), gaussian_logits(1, 4, 6), 1);
    });
    EXPECT_NE(e.find("cannot route router logits"), std::string::npos) << e;
    EXPECT_NE(e.find("e_score_correction_bias"), std::string::npos) << e;
    EXPECT_NE(e.find("pass topk_ids and topk_weights"), std::string::npos) << e;
  }
  {
    TempDir dir;
    const std::vector<float> three = {0.0f, 0.0f, 0.0f};
    const Checkpoint ckpt = Checkpoint::open(deepseek_checkpoint(dir.path() / "model", &three, Dtype::f32, {3}));
    EXPECT_ERROR_HAS(MoeConfig::from_checkpoint(ckpt, "model.layers.0"),
                     "is F32 [3]; the router's correction bias must be F32 or BF16 [4]");
  }
  {
    TempDir dir;
    const std::vector<float> nan = {0.0f, NAN, 0.0f, 0.0f};
    const Checkpoint ckpt = Checkpoint::open(deepseek_checkpoint(dir.path() / "model", &nan, Dtype::f32, {4}));
    EXPECT_ERROR_HAS(MoeConfig::from_checkpoint(ckpt, "model.layers.0"), "e_score_correction_bias");
  }
}

TEST(MoeFromCheckpoint, NamesTheLayerByNameOrPrefix) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}}));
  EXPECT_EQ(ckpt.moe_layer("model.layers.0").name, "model.layers.0.mlp.experts");
  EXPECT_EQ(ckpt.moe_layer("model.layers.0.mlp.experts").num_experts, 4);
  const std::string e = error_of([&] { ckpt.moe_layer("model.layers.1"); });
  EXPECT_NE(e.find("no MoE layer 'model.layers.1'"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.experts"), std::string::npos) << e;
}

TEST(MoeFromCheckpoint, ConfigNeedsWhatConfigJsonDoesNotSay) {
  TempDir a, b;
  const Checkpoint no_topk =
      Checkpoint::open(edited_checkpoint(a, [](nlohmann::json& c) { c.erase("num_experts_per_tok"); }));
  std::string e = error_of([&] { MoeConfig::from_checkpoint(no_topk, "model.layers.0"); });
  EXPECT_NE(e.find("no num_experts_per_tok"), std::string::npos) << e;
  EXPECT_NE(e.find("set MoeConfig::top_k"), std::string::npos) << e;
  const Checkpoint unknown = Checkpoint::open(edited_checkpoint(b, [](nlohmann::json& c) {
    c.erase("norm_topk_prob");
    c["model_type"] = "custom_moe";
  }));
  e = error_of([&] { MoeLayer::from_checkpoint(shared_context(), unknown, "model.layers.0"); });
  EXPECT_NE(e.find("no norm_topk_prob"), std::string::npos) << e;
  EXPECT_NE(e.find("set MoeConfig::renormalize"), std::string::npos) << e;
  // Set by hand, the layer loads.
  MoeConfig config;
  config.scheme = kNvfp4;
  config.top_k = 2;
  EXPECT_EQ(MoeLayer::from_checkpoint(shared_context(), unknown, "model.layers.0", config).top_k(), 2);
}

TEST(MoeFromCheckpoint, RefusesAConfigOfAnotherScheme) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}}));
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  config.scheme = kNvfp4A16;
  const std::string e = error_of([&] { MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config); });
  EXPECT_NE(e.find("is NVFP4 W4A4, but MoeConfig::scheme is NVFP4 W4A16"), std::string::npos) << e;
}

TEST(LinearFromCheckpoint, NamesWhatIsWrong) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}}));
  std::string e = error_of([&] { Linear::from_checkpoint(shared_context(), ckpt, "model.layers.0.mlp.experts"); });
  EXPECT_NE(e.find("is an MoE layer, not a linear module"), std::string::npos) << e;
  e = error_of([&] { Linear::from_checkpoint(shared_context(), ckpt, "model.layers.0.mlp.gate"); });
  EXPECT_NE(e.find("no quantized linear module 'model.layers.0.mlp.gate'"), std::string::npos) << e;
  LinearOptions no_tokens;
  no_tokens.max_tokens = 0;
  e = error_of([&] { Linear::from_checkpoint(shared_context(), ckpt, "model.layers.0.self_attn.q_proj", no_tokens); });
  EXPECT_NE(e.find("max_tokens"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp4cl::test
