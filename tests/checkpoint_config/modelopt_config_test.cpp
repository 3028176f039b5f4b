// ModelOpt configs: hf_quant_config.json and config.json forms, NVFP4 / W4A16_NVFP4 /
// MIXED_PRECISION, exclude_modules wildcards, and every error with its message.
#include <gtest/gtest.h>

#include <string>

#include "config_test_support.hpp"
#include "fp4cl/quant_config.hpp"

namespace fp4cl {
namespace {

using test::config_data_dir;
using test::expect_error;
using test::expect_layout;

constexpr QuantScheme kNvfp4W4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4W4A16{WeightFormat::nvfp4, Activations::bf16};

// An hf_quant_config.json whose "quantization" object is `quantization`.
QuantConfig hf_quant(const std::string& quantization) {
  return QuantConfig::from_json(R"({"producer": {"name": "modelopt", "version": "0.33.0"}, "quantization": )" +
                                    quantization + "}",
                                "hf_quant_config.json");
}

TEST(ModelOptConfig, LegacyHfQuantConfigNvfp4) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-llama-nvfp4");
  EXPECT_EQ(c.producer(), QuantProducer::modelopt);
  EXPECT_NE(c.source().find("hf_quant_config.json"), std::string::npos) << c.source();
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.31.mlp.down_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);

  expect_layout(c.layout(kNvfp4W4A4), "weight", "weight_scale", "weight_scale_2", "input_scale", ScaleDirection::dequant);
}

TEST(ModelOptConfig, ConfigJsonFormWithExcludeWildcards) {
  // config.json (quant_method "modelopt", "ignore") is read; hf_quant_config.json agrees.
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-qwen3-moe-nvfp4");
  EXPECT_NE(c.source().find("config.json (quantization_config)"), std::string::npos) << c.source();
  EXPECT_EQ(c.resolve("model.layers.3.mlp.experts.7.gate_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.47.mlp.experts.127.down_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.1.self_attn.q_proj"), kNvfp4W4A4);
  // "model.layers.0.self_attn*" excludes layer 0's attention only.
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.o_proj"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.0.mlp.experts.0.up_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.12.mlp.gate"), std::nullopt);
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  EXPECT_EQ(c.explain("model.layers.0.self_attn.k_proj"),
            "model.layers.0.self_attn.k_proj: not quantized (ignore entry 'model.layers.0.self_attn*')");
  EXPECT_EQ(c.explain("model.layers.2.mlp.experts.5.up_proj"),
            "model.layers.2.mlp.experts.5.up_proj: NVFP4 W4A4 (quant_algo NVFP4)");
}

TEST(ModelOptConfig, W4A16StaysW4A16AndNamesNoInputScale) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-qwen3-moe-w4a16");
  EXPECT_EQ(c.resolve("model.layers.5.mlp.experts.3.up_proj"), kNvfp4W4A16);
  EXPECT_EQ(c.resolve("model.layers.5.self_attn.v_proj"), kNvfp4W4A16);
  // "*mlp.gate" is an fnmatch wildcard: the router, not gate_proj.
  EXPECT_EQ(c.resolve("model.layers.5.mlp.gate"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.5.mlp.experts.3.gate_proj"), kNvfp4W4A16);

  // Calibrated input_scale tensors, if any, are not read.
  expect_layout(c.layout(kNvfp4W4A16), "weight", "weight_scale", "weight_scale_2", "", ScaleDirection::dequant);
}

TEST(ModelOptConfig, MixedPrecisionPerModuleAlgos) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-mixed");
  // A module-level entry ("model.layers.0.mlp.experts") covers every expert projection under it.
  EXPECT_EQ(c.resolve("model.layers.0.mlp.experts.17.down_proj"), kNvfp4W4A4);
  // Per-expert entries.
  EXPECT_EQ(c.resolve("model.layers.1.mlp.experts.1.gate_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.1.mlp.shared_expert.up_proj"), kNvfp4W4A16);
  // Asking for the parent of per-expert entries answers with their common algo.
  EXPECT_EQ(c.resolve("model.layers.1.mlp.experts"), kNvfp4W4A4);
  // Not listed: not quantized.
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.0.mlp.gate"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.0.mlp.shared_expert.up_proj"), std::nullopt);
  // FP8 layers are known but not runnable: resolving one is an error naming it.
  expect_error([&] { c.resolve("model.layers.0.self_attn.q_proj"); },
               {"hf_quant_config.json", "'model.layers.0.self_attn.q_proj'", "FP8", "cannot run"});
  EXPECT_NE(c.explain("model.layers.1.self_attn.o_proj").find("FP8"), std::string::npos);
}

TEST(ModelOptConfig, MixedPrecisionParentWithDifferentChildAlgosIsAnError) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "modelopt-mixed");
  expect_error([&] { c.resolve("model.layers.1.mlp"); },
               {"'model.layers.1.mlp'", "different quant_algo", "NVFP4", "W4A16_NVFP4"});
  expect_error([&] { c.resolve("model.layers.1"); }, {"different quant_algo"});
}

TEST(ModelOptConfig, FlatConfigJsonFormsAndCaseOfQuantAlgo) {
  const QuantConfig flat = QuantConfig::from_json(
      R"({"quant_method": "modelopt", "quant_algo": "nvfp4", "ignore": ["lm_head", "model.layers.*.mlp.gate"]})");
  EXPECT_EQ(flat.resolve("model.layers.4.mlp.experts.0.up_proj"), kNvfp4W4A4);
  EXPECT_EQ(flat.resolve("model.layers.4.mlp.gate"), std::nullopt);

  // A quantization_config that nests ModelOpt's "quantization" object.
  const QuantConfig nested = QuantConfig::from_json(
      R"({"quantization_config": {"quantization": {"quant_algo": "W4A16_NVFP4", "group_size": 16,
          "exclude_modules": ["lm_head"]}}})");
  EXPECT_EQ(nested.producer(), QuantProducer::modelopt);
  EXPECT_EQ(nested.resolve("model.layers.0.mlp.down_proj"), kNvfp4W4A16);
  EXPECT_EQ(nested.resolve("lm_head"), std::nullopt);

  // Older converted configs carry "quant_library" instead of "quant_method".
  const QuantConfig library =
      QuantConfig::from_json(R"({"quant_library": "modelopt", "quant_algo": "NVFP4", "ignore": []})");
  EXPECT_EQ(library.resolve("model.layers.0.mlp.down_proj"), kNvfp4W4A4);

  // The config.json form of MIXED_PRECISION keeps quantized_layers at the top level.
  const QuantConfig mixed = QuantConfig::from_json(
      R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
          "quantized_layers": {"model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
                               "model.layers.0.self_attn.q_proj": {"quant_algo": "w4a16_nvfp4"}},
          "ignore": ["lm_head"]})");
  EXPECT_EQ(mixed.resolve("model.layers.0.mlp.experts.3.up_proj"), kNvfp4W4A4);
  EXPECT_EQ(mixed.resolve("model.layers.0.self_attn.q_proj"), kNvfp4W4A16);
}

TEST(ModelOptConfig, UnknownQuantAlgoIsAnError) {
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP5", "exclude_modules": []})"); },
               {"hf_quant_config.json: quantization.quant_algo", "'NVFP5'", "not a ModelOpt quant_algo"});
  expect_error([] { QuantConfig::from_json(R"({"quant_method": "modelopt", "quant_algo": "FP4_FANCY"})", "c.json"); },
               {"c.json: quant_algo", "'FP4_FANCY'"});
}

TEST(ModelOptConfig, NonFp4QuantAlgoIsAnError) {
  expect_error([] { hf_quant(R"({"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"})"); },
               {"quantization.quant_algo", "'FP8'", "not an FP4 scheme"});
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4_AWQ", "group_size": 128})"); },
               {"quantization.quant_algo", "'NVFP4_AWQ'", "not an FP4 scheme"});
}

TEST(ModelOptConfig, MissingQuantAlgoIsAnError) {
  expect_error([] { hf_quant(R"({"group_size": 16, "exclude_modules": []})"); },
               {"hf_quant_config.json: quantization", "no quant_algo"});
}

TEST(ModelOptConfig, GroupSizeOtherThan16IsAnError) {
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "group_size": 32})"); },
               {"quantization.group_size", "is 32", "expected 16"});
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "group_size": "16"})"); },
               {"quantization.group_size", "must be an integer", "string"});
}

TEST(ModelOptConfig, AsymmetricOrPreScaledNvfp4IsAnError) {
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "group_size": 16, "has_zero_point": true})"); },
               {"quantization.has_zero_point", "asymmetric"});
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "group_size": 16, "pre_quant_scale": true})"); },
               {"quantization.pre_quant_scale", "pre-quantization scale"});
}

TEST(ModelOptConfig, MixedPrecisionErrors) {
  expect_error(
      [] {
        hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {
                       "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
                       "model.layers.0.self_attn.q_proj": {"quant_algo": "INT3_MAGIC"}}})");
      },
      {"quantization.quantized_layers[\"model.layers.0.self_attn.q_proj\"].quant_algo", "'INT3_MAGIC'"});
  expect_error(
      [] {
        hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {
                       "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 64}}})");
      },
      {"quantized_layers[\"model.layers.0.mlp.experts\"].group_size", "is 64", "expected 16"});
  expect_error([] { hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {}})"); },
               {"quantization.quantized_layers", "missing or empty"});
  expect_error([] { hf_quant(R"({"quant_algo": "MIXED_PRECISION"})"); },
               {"quantization.quantized_layers", "missing or empty"});
  expect_error(
      [] {
        hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {
                       "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"}}})");
      },
      {"quantization.quantized_layers", "no NVFP4 or W4A16_NVFP4"});
  expect_error(
      [] {
        hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {
                       "model.layers.0.mlp.experts": {"group_size": 16}}})");
      },
      {"quantized_layers[\"model.layers.0.mlp.experts\"].quant_algo", "missing"});
  expect_error(
      [] {
        hf_quant(R"({"quant_algo": "MIXED_PRECISION", "quantized_layers": {"model.layers.0.mlp.experts": "NVFP4"}})");
      },
      {"quantized_layers[\"model.layers.0.mlp.experts\"]", "must be an object"});
}

TEST(ModelOptConfig, WrongProducerOrMalformedExcludeListIsAnError) {
  expect_error(
      [] {
        QuantConfig::from_json(R"({"producer": {"name": "someone-else"}, "quantization": {"quant_algo": "NVFP4"}})",
                               "hf_quant_config.json");
      },
      {"hf_quant_config.json: producer.name", "'someone-else'", "'modelopt'"});
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "exclude_modules": "lm_head"})"); },
               {"quantization.exclude_modules", "must be a list of strings"});
  expect_error([] { hf_quant(R"({"quant_algo": "NVFP4", "exclude_modules": ["lm_head", 3]})"); },
               {"quantization.exclude_modules[1]", "must be a string"});
}

}  // namespace
}  // namespace fp4cl
