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
#include "fp4cl/moe.hpp"
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
