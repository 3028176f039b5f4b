// compressed-tensors configs: nvfp4-pack-quantized (NVFP4, NVFP4A16), mxfp4-pack-quantized
// (MXFP4, MXFP4A16), mixed-precision, config-group targets and their precedence, ignore entries,
// and every error with its message.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "config_test_support.hpp"
#include "fp4cl/quant_config.hpp"

namespace fp4cl {
namespace {

using test::config_data_dir;
using test::expect_error;
using test::expect_layout;

constexpr QuantScheme kNvfp4W4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4W4A16{WeightFormat::nvfp4, Activations::bf16};
constexpr QuantScheme kMxfp4W4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4W4A16{WeightFormat::mxfp4, Activations::bf16};

// QuantizationArgs as llm-compressor's presets write them.
const std::string kNvfp4Weights =
    R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": false})";
const std::string kNvfp4Inputs =
    R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": "local"})";
const std::string kMxfp4Weights =
    R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": true, "dynamic": false})";
const std::string kMxfp4Inputs =
    R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": true, "dynamic": true})";
const std::string kFp8TokenInputs =
    R"({"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true})";
const std::string kInt8TokenInputs =
    R"({"num_bits": 8, "type": "int", "strategy": "token", "symmetric": true, "dynamic": true})";

// One config group: targets (JSON list), weights and input_activations (JSON or "null").
std::string group(const std::string& targets, const std::string& weights, const std::string& inputs,
                  const std::string& format = "") {
  std::string g = R"({"targets": )" + targets + R"(, "weights": )" + weights + R"(, "input_activations": )" + inputs +
                  R"(, "output_activations": null)";
  if (!format.empty()) g += R"(, "format": ")" + format + "\"";
  return g + "}";
}

// A config_groups object from (name, group JSON) pairs.
std::string groups(std::initializer_list<std::pair<std::string, std::string>> named) {
  std::string s = "{";
  for (const auto& [name, g] : named) s += (s.size() > 1 ? ", \"" : "\"") + name + "\": " + g;
  return s + "}";
}

// A bare compressed-tensors quantization_config named "config.json" in messages.
QuantConfig ct(const std::string& groups, const std::string& ignore = "[]",
               const std::string& format = "nvfp4-pack-quantized") {
  return QuantConfig::from_json(R"({"quant_method": "compressed-tensors", "format": ")" + format +
                                    R"(", "config_groups": )" + groups + R"(, "ignore": )" + ignore + "}",
                                "config.json");
}

TEST(CompressedTensorsConfig, Nvfp4MoeCheckpoint) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "ct-qwen3-moe-nvfp4");
  EXPECT_EQ(c.producer(), QuantProducer::compressed_tensors);
  EXPECT_NE(c.source().find("config.json (quantization_config)"), std::string::npos) << c.source();
  EXPECT_EQ(c.resolve("model.layers.3.mlp.experts.7.gate_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.47.mlp.gate"), std::nullopt);
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  EXPECT_EQ(c.explain("model.layers.0.self_attn.q_proj"),
            "model.layers.0.self_attn.q_proj: NVFP4 W4A4 (config_groups.group_0 target 'Linear')");
  EXPECT_EQ(c.explain("model.layers.9.mlp.gate"), "model.layers.9.mlp.gate: not quantized (ignore entry 'model.layers.9.mlp.gate')");

  expect_layout(c.layout(kNvfp4W4A4), "weight_packed", "weight_scale", "weight_global_scale", "input_global_scale",
                ScaleDirection::quant);
}

TEST(CompressedTensorsConfig, Nvfp4A16StaysW4A16) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "ct-llama-nvfp4a16");
  EXPECT_EQ(c.resolve("model.layers.0.mlp.down_proj"), kNvfp4W4A16);
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  expect_layout(c.layout(kNvfp4W4A16), "weight_packed", "weight_scale", "weight_global_scale", "",
                ScaleDirection::quant);
}

TEST(CompressedTensorsConfig, Mxfp4AndMxfp4A16) {
  const QuantConfig w4a4 = QuantConfig::load(config_data_dir() / "ct-qwen3-mxfp4");
  EXPECT_EQ(w4a4.resolve("model.layers.10.mlp.up_proj"), kMxfp4W4A4);
  EXPECT_EQ(w4a4.resolve("lm_head"), std::nullopt);
  const QuantConfig w4a16 = QuantConfig::load(config_data_dir() / "ct-qwen3-mxfp4a16");
  EXPECT_EQ(w4a16.resolve("model.layers.10.mlp.up_proj"), kMxfp4W4A16);

  for (const QuantScheme& s : {kMxfp4W4A4, kMxfp4W4A16})
    expect_layout(w4a4.layout(s), "weight_packed", "weight_scale", "", "", ScaleDirection::none);
}

TEST(CompressedTensorsConfig, MixedPrecisionWithRegexTargets) {
  const QuantConfig c = QuantConfig::load(config_data_dir() / "ct-qwen3-moe-mixed");
  EXPECT_EQ(c.resolve("model.layers.0.mlp.experts.3.gate_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.47.mlp.experts.127.down_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.0.mlp.gate"), std::nullopt);  // "re:.*mlp.gate$"
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  // Targeted by no group: not quantized.
  EXPECT_EQ(c.resolve("model.layers.0.mlp.experts"), std::nullopt);
  // The FP8 group is known but not runnable.
  expect_error([&] { c.resolve("model.layers.4.self_attn.k_proj"); },
               {"'model.layers.4.self_attn.k_proj'", "float-quantized", "config_groups.group_1", "cannot run"});
}

TEST(CompressedTensorsConfig, MostSpecificTargetWins) {
  // compressed-tensors' precedence: exact name > regex > class "Linear".
  const QuantConfig c = ct(groups({
      {"group_0", group(R"(["Linear"])", kNvfp4Weights, kNvfp4Inputs)},
      {"group_1", group(R"(["re:.*self_attn.*"])", kNvfp4Weights, "null")},
      {"group_2", group(R"(["model.layers.0.self_attn.o_proj"])", kMxfp4Weights, kMxfp4Inputs, "mxfp4-pack-quantized")},
  }));
  EXPECT_EQ(c.resolve("model.layers.0.mlp.down_proj"), kNvfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), kNvfp4W4A16);
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.o_proj"), kMxfp4W4A4);
  EXPECT_EQ(c.resolve("model.layers.1.self_attn.o_proj"), kNvfp4W4A16);
}

TEST(CompressedTensorsConfig, EquallySpecificGroupsWithDifferentSchemesAreAnError) {
  const QuantConfig both_linear = ct(groups({{"group_0", group(R"(["Linear"])", kNvfp4Weights, kNvfp4Inputs)},
                                            {"group_1", group(R"(["Linear"])", kNvfp4Weights, "null")}}));
  expect_error([&] { both_linear.resolve("model.layers.0.mlp.up_proj"); },
               {"config.json", "'model.layers.0.mlp.up_proj'", "config_groups.group_0", "config_groups.group_1",
                "NVFP4 W4A4", "NVFP4 W4A16"});
  const QuantConfig two_regexes = ct(groups({{"group_0", group(R"(["re:.*mlp.*"])", kNvfp4Weights, kNvfp4Inputs)},
                                            {"group_1", group(R"(["re:.*up_proj$"])", kNvfp4Weights, "null")}}));
  EXPECT_EQ(two_regexes.resolve("model.layers.0.mlp.down_proj"), kNvfp4W4A4);
  expect_error([&] { two_regexes.resolve("model.layers.0.mlp.up_proj"); },
               {"'re:.*mlp.*'", "'re:.*up_proj$'", "one scheme per module"});
  // The same scheme from two groups is not ambiguous.
  const QuantConfig agreeing = ct(groups({{"group_0", group(R"(["Linear"])", kNvfp4Weights, "null")},
                                         {"group_1", group(R"(["Linear"])", kNvfp4Weights, "null")}}));
  EXPECT_EQ(agreeing.resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A16);
}

TEST(CompressedTensorsConfig, IgnoreEntries) {
  const QuantConfig c = ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, kNvfp4Inputs) + "}",
                           R"(["lm_head", "re:.*self_attn.*", "model.layers.2.mlp.down_proj"])");
  EXPECT_EQ(c.resolve("lm_head"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.0.self_attn.q_proj"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.2.mlp.down_proj"), std::nullopt);
  EXPECT_EQ(c.resolve("model.layers.3.mlp.down_proj"), kNvfp4W4A4);
  // Exact entries are whole names: a parent's name does not ignore its children.
  const QuantConfig parent = ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null") + "}", R"(["model.visual"])");
  EXPECT_EQ(parent.resolve("model.visual.blocks.0.mlp.fc1"), kNvfp4W4A16);
}

TEST(CompressedTensorsConfig, PresetNamedGroups) {
  EXPECT_EQ(ct(R"({"NVFP4": ["Linear"]})").resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A4);
  EXPECT_EQ(ct(R"({"nvfp4a16": ["Linear"]})").resolve("model.layers.0.mlp.up_proj"), kNvfp4W4A16);
  EXPECT_EQ(ct(R"({"MXFP4": ["Linear"]})", "[]", "mxfp4-pack-quantized").resolve("x.up_proj"), kMxfp4W4A4);
  EXPECT_EQ(ct(R"({"MXFP4A16": ["Linear"]})", "[]", "mxfp4-pack-quantized").resolve("x.up_proj"), kMxfp4W4A16);
  expect_error([] { ct(R"({"FP8_DYNAMIC": ["Linear"]})"); },
               {"config.json: config_groups.FP8_DYNAMIC", "'FP8_DYNAMIC'", "not an FP4 preset"});
  // A preset still has to fit the format.
  expect_error([] { ct(R"({"MXFP4": ["Linear"]})"); }, {"config_groups.MXFP4.weights.strategy", "tensor_group"});
}

TEST(CompressedTensorsConfig, Nvfp4ActivationsWithDynamicFalseAreW4A4) {
  const std::string legacy =
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": false})";
  EXPECT_EQ(ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, legacy) + "}").resolve("a.b"), kNvfp4W4A4);
}

TEST(CompressedTensorsConfig, Nvfp4WeightsWithOtherActivationsAreAnError) {
  for (const std::string& inputs : {kFp8TokenInputs, kInt8TokenInputs}) {
    expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, inputs) + "}"); },
                 {"config.json: config_groups.group_0.input_activations", "NVFP4 weights need NVFP4 activations",
                  "or none", "got num_bits 8"});
  }
  // Fully dynamic NVFP4 activations would have no stored input_global_scale.
  const std::string fully_dynamic =
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": true})";
  expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, fully_dynamic) + "}"); },
               {"group_0.input_activations", "dynamic true"});
  // MXFP4 activations with NVFP4 weights.
  expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, kMxfp4Inputs) + "}"); },
               {"group_0.input_activations", "strategy group", "group_size 32"});
  // ... and NVFP4 activations with MXFP4 weights.
  expect_error(
      [&] {
        ct(R"({"group_0": )" + group(R"(["Linear"])", kMxfp4Weights, kNvfp4Inputs) + "}", "[]", "mxfp4-pack-quantized");
      },
      {"group_0.input_activations", "MXFP4 weights need MXFP4 activations"});
}

TEST(CompressedTensorsConfig, WrongGroupSizeIsAnError) {
  const std::string nvfp4_32 =
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 32, "symmetric": true})";
  expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", nvfp4_32, "null") + "}"); },
               {"config_groups.group_0.weights.group_size", "is 32", "expected 16", "NVFP4"});
  const std::string mxfp4_16 = R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16})";
  expect_error(
      [&] { ct(R"({"group_0": )" + group(R"(["Linear"])", mxfp4_16, "null") + "}", "[]", "mxfp4-pack-quantized"); },
      {"config_groups.group_0.weights.group_size", "is 16", "expected 32", "MXFP4"});
}

TEST(CompressedTensorsConfig, WeightsThatAreNotSymmetricFp4AreAnError) {
  const auto weights_error = [](const std::string& weights, std::initializer_list<std::string_view> parts) {
    expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", weights, "null") + "}"); }, parts);
  };
  weights_error(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": false})",
                {"group_0.weights.symmetric", "asymmetric"});
  weights_error(R"({"num_bits": 8, "type": "float", "strategy": "tensor_group", "group_size": 16})",
                {"group_0.weights.num_bits", "is 8", "expected 4"});
  weights_error(R"({"num_bits": 4, "type": "int", "strategy": "tensor_group", "group_size": 16})",
                {"group_0.weights.type", "\"int\"", "expected \"float\""});
  // compressed-tensors' defaults: num_bits 8, type int.
  weights_error(R"({"strategy": "tensor_group", "group_size": 16})", {"group_0.weights.num_bits", "is 8"});
  weights_error(R"({"num_bits": 4, "type": "float", "group_size": 16})",
                {"group_0.weights.strategy", "\"group\"", "inferred", "expected \"tensor_group\""});
  weights_error(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "actorder": "group"})",
                {"group_0.weights.actorder", "g_idx"});
  weights_error(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": true})",
                {"group_0.weights.dynamic", "expected false"});
  weights_error(
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "scale_dtype": "torch.bfloat16"})",
      {"group_0.weights.scale_dtype", "torch.bfloat16"});
  weights_error(R"({"num_bits": "4", "type": "float", "strategy": "tensor_group", "group_size": 16})",
                {"group_0.weights.num_bits", "must be an integer", "string"});
  expect_error([] { ct(R"({"group_0": {"targets": ["Linear"], "input_activations": null}})"); },
               {"group_0.weights", "missing"});
}

TEST(CompressedTensorsConfig, UnknownOrMissingFormatIsAnError) {
  expect_error([] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null") + "}", "[]", "nvfp5-packed"); },
               {"config.json: format", "'nvfp5-packed'", "not a compressed-tensors format"});
  expect_error(
      [] {
        ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null", "nvfp4-packed") + "}", "[]",
           "mixed-precision");
      },
      {"config_groups.group_0.format", "'nvfp4-packed'"});
  expect_error([] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null") + "}", "[]", "mixed-precision"); },
               {"config.json: format", "\"mixed-precision\"", "group_0"});
  expect_error(
      [] {
        QuantConfig::from_json(
            R"({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" +
                kNvfp4Weights + "}}}",
            "config.json");
      },
      {"config.json: format", "missing", "group_0"});
}

TEST(CompressedTensorsConfig, ConfigWithoutFp4GroupIsAnError) {
  const std::string fp8 = R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true})";
  expect_error([&] { ct(R"({"group_0": )" + group(R"(["Linear"])", fp8, kFp8TokenInputs) + "}", "[]", "float-quantized"); },
               {"config.json: config_groups", "no group with an FP4 format"});
  expect_error([] { ct("{}"); }, {"config.json: config_groups", "missing or empty"});
}

TEST(CompressedTensorsConfig, FeaturesThatChangeTheMathAreErrors) {
  const std::string g = R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null") + "}";
  expect_error(
      [&] {
        QuantConfig::from_json(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": )" + g + R"(, "transform_config": {"config_groups": {"R1": {}}}})",
                               "config.json");
      },
      {"config.json: transform_config", "not supported"});
  expect_error(
      [&] {
        QuantConfig::from_json(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": )" + g + R"(, "sparsity_config": {"format": "sparse-24-bitmask", "targets": ["Linear"]}})",
                               "config.json");
      },
      {"config.json: sparsity_config.format", "'sparse-24-bitmask'"});
  expect_error(
      [] {
        ct(R"({"group_0": {"targets": ["Linear"], "weights": )" + kNvfp4Weights +
           R"(, "output_activations": {"num_bits": 8, "type": "float"}}})");
      },
      {"group_0.output_activations", "not supported"});
}

TEST(CompressedTensorsConfig, MalformedTargetsAndIgnoreAreErrors) {
  expect_error([] { ct(R"({"group_0": {"weights": )" + kNvfp4Weights + "}}"); },
               {"config.json: config_groups.group_0.targets", "missing or empty"});
  expect_error([] { ct(R"({"group_0": {"targets": "Linear", "weights": )" + kNvfp4Weights + "}}"); },
               {"config_groups.group_0.targets", "must be a list of strings"});
  expect_error([] { ct(R"({"group_0": )" + group(R"(["Linear"])", kNvfp4Weights, "null") + "}", R"(["re:(?<=x)y"])"); },
               {"config.json: ignore[0]", "'re:(?<=x)y'"});
}

}  // namespace
}  // namespace fp4cl
