// Finding and reading a checkpoint's quantization config: model directories with config.json
// and/or hf_quant_config.json, single files, JSON strings; missing, malformed and conflicting
// files; the producers' tensor layouts.
#include <gtest/gtest.h>

#include <string>

#include "config_test_support.hpp"
#include "fp4cl/quant_config.hpp"

namespace fp4cl {
namespace {

using test::config_data_dir;
using test::expect_error;
using test::expect_layout;
using test::TempDir;

constexpr QuantScheme kNvfp4W4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4W4A16{WeightFormat::nvfp4, Activations::bf16};
constexpr QuantScheme kMxfp4W4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4W4A16{WeightFormat::mxfp4, Activations::bf16};

const char* const kModelOptNvfp4 =
    R"({"producer": {"name": "modelopt", "version": "0.33.0"},
        "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})";

const char* const kCtNvfp4Config = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
      "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}},
    "ignore": ["lm_head"]}})";

TEST(QuantConfigLoading, SingleFilesOfEachKind) {
  const QuantConfig hf = QuantConfig::from_file(config_data_dir() / "modelopt-llama-nvfp4" / "hf_quant_config.json");
  EXPECT_EQ(hf.producer(), QuantProducer::modelopt);
  EXPECT_EQ(hf.resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A4);

  const QuantConfig config = QuantConfig::from_file(config_data_dir() / "ct-llama-nvfp4a16" / "config.json");
  EXPECT_EQ(config.producer(), QuantProducer::compressed_tensors);
  EXPECT_EQ(config.resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A16);
  EXPECT_EQ(config.source(), (config_data_dir() / "ct-llama-nvfp4a16" / "config.json").string() +
                                 " (quantization_config)");

  const QuantConfig bare = QuantConfig::from_json(
      R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
          "config_groups": {"NVFP4": ["Linear"]}})",
      "bare.json");
  EXPECT_EQ(bare.source(), "bare.json");
  EXPECT_EQ(bare.resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A4);
}

TEST(QuantConfigLoading, HfQuantConfigAloneIsEnough) {
  TempDir dir;
  dir.write("hf_quant_config.json", kModelOptNvfp4);
  const QuantConfig c = QuantConfig::load(dir.path());
  EXPECT_EQ(c.source(), (dir.path() / "hf_quant_config.json").string());
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
}

TEST(QuantConfigLoading, MissingDirectoryOrFilesAreErrors) {
  TempDir dir;
  expect_error([&] { QuantConfig::load(dir.path() / "nope"); }, {"model directory", "nope", "does not exist"});
  expect_error([&] { QuantConfig::load(dir.path()); }, {dir.path().string(), "neither config.json nor hf_quant_config.json"});
  expect_error([&] { QuantConfig::from_file(dir.path() / "config.json"); },
               {(dir.path() / "config.json").string(), "no such file"});
}

TEST(QuantConfigLoading, UnquantizedModelIsAnError) {
  TempDir dir;
  dir.write("config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096})");
  expect_error([&] { QuantConfig::load(dir.path()); },
               {(dir.path() / "config.json").string(), "no \"quantization_config\"", "not quantized"});
  expect_error([&] { QuantConfig::from_file(dir.path() / "config.json"); },
               {"config.json", "no \"quantization_config\"", "not quantized"});
}

TEST(QuantConfigLoading, ConfigJsonIsParsedStrictly) {
  // A repeated key would otherwise silently keep the last value: the scheme must not depend on it.
  expect_error([] {
    QuantConfig::from_json(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                               "format": "mxfp4-pack-quantized", "config_groups": {"NVFP4": ["Linear"]}})",
                           "dup.json");
  },
               {"dup.json", "duplicate key", "format"});
  expect_error([] { QuantConfig::from_json(std::string(200, '[') + std::string(200, ']'), "deep.json"); },
               {"deep.json", "nest"});
  expect_error([] { QuantConfig::from_json("{\"quant_method\": \"\xff\"}", "utf8.json"); }, {"utf8.json", "UTF-8"});
  TempDir dir;
  dir.write("config.json", R"({"quantization_config": {"quant_method": "compressed-tensors"}, "quantization_config": {}})");
  expect_error([&] { QuantConfig::load(dir.path()); }, {(dir.path() / "config.json").string(), "duplicate key"});
}

TEST(QuantConfigLoading, MalformedJsonIsAnErrorNamingTheFile) {
  TempDir dir;
  dir.write("config.json", R"({"quantization_config": {"quant_method": "compressed-tensors",)");
  expect_error([&] { QuantConfig::load(dir.path()); }, {(dir.path() / "config.json").string(), "malformed JSON"});

  TempDir hf_dir;
  hf_dir.write("config.json", R"({"model_type": "llama"})");
  hf_dir.write("hf_quant_config.json", R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": NVFP4}})");
  expect_error([&] { QuantConfig::load(hf_dir.path()); },
               {(hf_dir.path() / "hf_quant_config.json").string(), "malformed JSON"});

  expect_error([] { QuantConfig::from_json("[1, 2", "text"); }, {"text: malformed JSON"});
}

TEST(QuantConfigLoading, DocumentsThatAreNotQuantizationConfigsAreErrors) {
  expect_error([] { QuantConfig::from_json("[1, 2]", "list.json"); }, {"list.json:", "must be an object", "array"});
  expect_error([] { QuantConfig::from_json(R"({"hello": "world"})", "hello.json"); },
               {"hello.json:", "is not a quantization config"});
  expect_error([] { QuantConfig::from_json(R"({"quantization_config": {"bits": 4}})", "config.json"); },
               {"config.json: quantization_config", "no quant_method"});
  expect_error([] { QuantConfig::from_json(R"({"quantization_config": [1]})", "config.json"); },
               {"config.json: quantization_config", "must be an object"});
}

TEST(QuantConfigLoading, UnknownQuantMethodIsAnError) {
  for (const char* method : {"gptq", "awq", "fp8", "something-new"}) {
    expect_error(
        [&] {
          QuantConfig::from_json(std::string(R"({"quantization_config": {"quant_method": ")") + method + "\"}}",
                                 "config.json");
        },
        {"config.json: quantization_config.quant_method", std::string("'") + method + "'", "does not read"});
  }
}

// gpt-oss's quantization_config (transformers' Mxfp4Config): every module MXFP4 W4A16 but those
// modules_to_not_convert matches from the start of the name, as a regular expression.
TEST(QuantConfigLoading, GptOssMxfp4ConfigQuantizesAllButItsExclusions) {
  const QuantConfig c = QuantConfig::from_json(
      R"({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
          "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})",
      "config.json");
  EXPECT_EQ(c.producer(), QuantProducer::gpt_oss);
  EXPECT_STREQ(to_string(c.producer()), "gpt-oss MXFP4");
  EXPECT_EQ(c.resolve("model.layers.3.mlp.experts"), (QuantScheme{WeightFormat::mxfp4, Activations::bf16}));
  EXPECT_EQ(c.resolve("model.layers.3.self_attn.q_proj"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.10.mlp.router"), std::nullopt);
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  EXPECT_NE(c.explain("model.layers.3.self_attn.o_proj").find("modules_to_not_convert entry 'model.layers.*.self_attn'"),
            std::string::npos)
      << c.explain("model.layers.3.self_attn.o_proj");
  // No per-module layout: its MXFP4 tensors are fused experts.
  expect_error([&] { c.layout(QuantScheme{WeightFormat::mxfp4, Activations::bf16}); },
               {"gpt-oss MXFP4 checkpoints have no per-module MXFP4 W4A16 layout", "fused"});
  // Without modules_to_not_convert every module is quantized; a bad regex is refused by name.
  EXPECT_TRUE(QuantConfig::from_json(R"({"quant_method": "mxfp4"})", "q.json").resolve("lm_head").has_value());
  expect_error([] { QuantConfig::from_json(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["(a"]})", "q.json"); },
               {"q.json: modules_to_not_convert", "(a"});
}

TEST(QuantConfigLoading, ConfigJsonAndHfQuantConfigMustAgree) {
  // ModelOpt in both files with different algos.
  TempDir dir;
  dir.write("config.json",
            R"({"model_type": "qwen3_moe", "quantization_config": {"quant_method": "modelopt",
                "quant_algo": "W4A16_NVFP4", "ignore": ["lm_head"]}})");
  dir.write("hf_quant_config.json", kModelOptNvfp4);
  expect_error([&] { QuantConfig::load(dir.path()); },
               {"config.json (quantization_config)", "hf_quant_config.json", "disagree", "W4A16_NVFP4", "NVFP4"});

  // A compressed-tensors config.json next to a ModelOpt hf_quant_config.json.
  TempDir mixed_dir;
  mixed_dir.write("config.json", kCtNvfp4Config);
  mixed_dir.write("hf_quant_config.json", kModelOptNvfp4);
  expect_error([&] { QuantConfig::load(mixed_dir.path()); },
               {"disagree", "compressed-tensors", "ModelOpt NVFP4", "remove the stale one"});

  // Agreeing files load, from config.json.
  TempDir agree_dir;
  agree_dir.write("config.json",
                  R"({"model_type": "llama", "quantization_config": {"quant_method": "modelopt",
                      "quant_algo": "NVFP4", "ignore": ["lm_head"]}})");
  agree_dir.write("hf_quant_config.json", kModelOptNvfp4);
  const QuantConfig c = QuantConfig::load(agree_dir.path());
  EXPECT_EQ(c.source(), (agree_dir.path() / "config.json").string() + " (quantization_config)");
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), kNvfp4W4A4);
}

TEST(QuantConfigLoading, ConfigJsonWithoutQuantizationConfigFallsBackToHfQuantConfig) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-llama-nvfp4");
  EXPECT_EQ(c.source(), (config_data_dir() / "modelopt-llama-nvfp4" / "hf_quant_config.json").string());
}

TEST(TensorLayout, EachProducerAndScheme) {
  struct Row {
    QuantProducer producer;
    QuantScheme scheme;
    const char* weight;
    const char* weight_scale;
    const char* weight_global_scale;
    const char* input_global_scale;
    ScaleDirection direction;
  };
  // FP4.md §5.
  const Row rows[] = {
      {QuantProducer::modelopt, kNvfp4W4A4, "weight", "weight_scale", "weight_scale_2", "input_scale",
       ScaleDirection::dequant},
      {QuantProducer::modelopt, kNvfp4W4A16, "weight", "weight_scale", "weight_scale_2", "", ScaleDirection::dequant},
      {QuantProducer::compressed_tensors, kNvfp4W4A4, "weight_packed", "weight_scale", "weight_global_scale",
       "input_global_scale", ScaleDirection::quant},
      {QuantProducer::compressed_tensors, kNvfp4W4A16, "weight_packed", "weight_scale", "weight_global_scale", "",
       ScaleDirection::quant},
      {QuantProducer::compressed_tensors, kMxfp4W4A4, "weight_packed", "weight_scale", "", "", ScaleDirection::none},
      {QuantProducer::compressed_tensors, kMxfp4W4A16, "weight_packed", "weight_scale", "", "", ScaleDirection::none},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.producer)) + " " + r.scheme.name());
    expect_layout(tensor_layout(r.producer, r.scheme), r.weight, r.weight_scale, r.weight_global_scale,
                  r.input_global_scale, r.direction);
  }
  expect_error([] { tensor_layout(QuantProducer::modelopt, kMxfp4W4A4); }, {"ModelOpt", "no MXFP4 W4A4 layout"});
}

TEST(TensorLayout, TensorNames) {
  const TensorLayout t = tensor_layout(QuantProducer::compressed_tensors, kNvfp4W4A16);
  EXPECT_EQ(TensorLayout::tensor_name("model.layers.3.mlp.experts.7.gate_proj", t.weight),
            "model.layers.3.mlp.experts.7.gate_proj.weight_packed");
  EXPECT_EQ(TensorLayout::tensor_name("m.q_proj", t.weight_global_scale), "m.q_proj.weight_global_scale");
  expect_error([&] { TensorLayout::tensor_name("m.q_proj", t.input_global_scale); }, {"'m.q_proj'", "no such tensor"});
  EXPECT_STREQ(to_string(ScaleDirection::dequant), "dequant");
  EXPECT_STREQ(to_string(QuantProducer::compressed_tensors), "compressed-tensors");
}

}  // namespace
}  // namespace fp4cl
