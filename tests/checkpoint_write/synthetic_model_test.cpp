// The synthetic Qwen3-MoE generator: tensor names and shapes, config.json, determinism, value
// spread, dtypes, sharding, option errors and output-directory rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_write/checkpoint_write_test_util.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl {
namespace {

using test::TempDir;

TEST(SyntheticModel, HasQwen3MoeTensorNamesAndShapes) {
  SyntheticModelOptions o;  // defaults: 2 layers, H 256, I 128, E 8, heads 4 × 64, kv 2
  const std::vector<SyntheticTensor> tensors = synthetic_model_tensors(o);
  EXPECT_EQ(tensors.size(), static_cast<std::size_t>(3 + o.layers * (9 + 3 * o.experts)));
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const SyntheticTensor& t : tensors) EXPECT_TRUE(shapes.emplace(t.name, t.shape).second) << t.name;
  const std::map<std::string, std::vector<std::int64_t>> expected = {
      {"model.embed_tokens.weight", {512, 256}},
      {"model.layers.0.input_layernorm.weight", {256}},
      {"model.layers.0.self_attn.q_proj.weight", {256, 256}},
      {"model.layers.0.self_attn.k_proj.weight", {128, 256}},
      {"model.layers.0.self_attn.v_proj.weight", {128, 256}},
      {"model.layers.0.self_attn.o_proj.weight", {256, 256}},
      {"model.layers.0.self_attn.q_norm.weight", {64}},
      {"model.layers.0.self_attn.k_norm.weight", {64}},
      {"model.layers.0.post_attention_layernorm.weight", {256}},
      {"model.layers.1.mlp.gate.weight", {8, 256}},
      {"model.layers.1.mlp.experts.7.gate_proj.weight", {128, 256}},
      {"model.layers.1.mlp.experts.7.up_proj.weight", {128, 256}},
      {"model.layers.1.mlp.experts.7.down_proj.weight", {256, 128}},
      {"model.norm.weight", {256}},
      {"lm_head.weight", {512, 256}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(shapes.count(name)) << name;
    EXPECT_EQ(shapes.at(name), shape) << name;
  }
  EXPECT_EQ(shapes.count("model.layers.2.input_layernorm.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.mlp.experts.8.up_proj.weight"), 0u);
}

TEST(SyntheticModel, ConfigDescribesTheModel) {
  SyntheticModelOptions o = test::tiny_model();
  o.dtype = Dtype::f32;
  const nlohmann::json c = nlohmann::json::parse(synthetic_model_config(o));
  EXPECT_EQ(c.at("model_type"), "qwen3_moe");
  EXPECT_EQ(c.at("architectures"), nlohmann::json::array({"Qwen3MoeForCausalLM"}));
  EXPECT_EQ(c.at("hidden_size"), o.hidden);
  EXPECT_EQ(c.at("moe_intermediate_size"), o.intermediate);
  EXPECT_EQ(c.at("num_experts"), o.experts);
  EXPECT_EQ(c.at("num_experts_per_tok"), o.experts_per_token);
  EXPECT_EQ(c.at("norm_topk_prob"), true);
  EXPECT_EQ(c.at("num_hidden_layers"), o.layers);
  EXPECT_EQ(c.at("num_attention_heads"), o.heads);
  EXPECT_EQ(c.at("num_key_value_heads"), o.kv_heads);
  EXPECT_EQ(c.at("head_dim"), o.head_dim);
  EXPECT_EQ(c.at("vocab_size"), o.vocab);
  EXPECT_EQ(c.at("torch_dtype"), "float32");
  EXPECT_EQ(c.at("tie_word_embeddings"), false);
  EXPECT_EQ(c.at("decoder_sparse_step"), 1);
  EXPECT_EQ(c.at("mlp_only_layers"), nlohmann::json::array());
  EXPECT_FALSE(c.contains("quantization_config"));
}

TEST(SyntheticModel, SameSeedGivesIdenticalFilesAndAnotherSeedDifferentWeights) {
  TempDir dir;
  const SyntheticModelOptions o = test::tiny_model(3);
  write_synthetic_model(dir.path() / "a", o);
  write_synthetic_model(dir.path() / "b", o);
  SyntheticModelOptions other = o;
  other.seed = 4;
  write_synthetic_model(dir.path() / "c", other);
  const auto a = test::directory_bytes(dir.path() / "a");
  const auto c = test::directory_bytes(dir.path() / "c");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, test::directory_bytes(dir.path() / "b"));
  EXPECT_EQ(a.at("config.json"), c.at("config.json"));
  EXPECT_NE(a.at("model.safetensors"), c.at("model.safetensors"));
  // Every tensor differs, not just one.
  const SafetensorsModel ma = SafetensorsModel::open((dir.path() / "a").string());
  const SafetensorsModel mc = SafetensorsModel::open((dir.path() / "c").string());
  for (const std::string& name : ma.names()) {
    const auto ba = ma.tensor(name).bytes(), bc = mc.tensor(name).bytes();
    EXPECT_FALSE(std::equal(ba.begin(), ba.end(), bc.begin())) << name;
  }
}

TEST(SyntheticModel, FileHoldsTheGeneratedValuesRoundedToItsDtype) {
  TempDir dir;
  for (const Dtype dtype : {Dtype::bf16, Dtype::f32}) {
    SyntheticModelOptions o = test::tiny_model(9);
    o.dtype = dtype;
    const auto out = dir.path() / dtype_name(dtype);
    write_synthetic_model(out, o);
    const SafetensorsModel m = SafetensorsModel::open(out.string());
    const std::vector<SyntheticTensor> tensors = synthetic_model_tensors(o);
    ASSERT_EQ(m.size(), tensors.size());
    EXPECT_EQ(m.shards().at(0).metadata().at("format"), "pt");
    for (const SyntheticTensor& t : tensors) {
      const TensorView v = m.tensor(t.name);
      EXPECT_EQ(v.dtype(), dtype) << t.name;
      EXPECT_EQ(v.shape(), t.shape) << t.name;
      const std::vector<double> values = synthetic_tensor_values(o, t);
      const std::vector<float> stored = test::float_values(v);
      ASSERT_EQ(stored.size(), values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        const float f = static_cast<float>(values[i]);
        const float want = dtype == Dtype::bf16 ? bf16_to_float(float_to_bf16(f)) : f;
        ASSERT_EQ(stored[i], want) << t.name << " element " << i;
      }
    }
  }
}

double rms(const double* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += x[i] * x[i];
  return std::sqrt(s / static_cast<double>(n));
}

TEST(SyntheticModel, ValuesHaveRealisticSpread) {
  SyntheticModelOptions o;
  o.seed = 5;
  // A projection: rows scaled differently, a few large outliers, overall RMS near 1/sqrt(K).
  const SyntheticTensor proj{"model.layers.0.mlp.experts.3.up_proj.weight", {128, 256}};
  const std::vector<double> w = synthetic_tensor_values(o, proj);
  std::vector<double> row_rms;
  for (std::int64_t r = 0; r < 128; ++r) row_rms.push_back(rms(&w[static_cast<std::size_t>(r * 256)], 256));
  const auto [lo, hi] = std::minmax_element(row_rms.begin(), row_rms.end());
  EXPECT_GT(*hi / *lo, 6.0) << "rows should be scaled over [1/8, 2)";
  const double sigma = 1.0 / 16.0, total_rms = rms(w.data(), w.size());
  EXPECT_GT(total_rms, 0.4 * sigma);
  EXPECT_LT(total_rms, 2.0 * sigma);
  double amax = 0;
  for (const double x : w) amax = std::max(amax, std::fabs(x));
  EXPECT_GT(amax, 12.0 * total_rms) << "outliers (×8..32) should stand out";
  // Norm weights scatter around 1; the router is plain N(0, 1/K).
  const std::vector<double> norm = synthetic_tensor_values(o, {"model.norm.weight", {256}});
  double mean = 0;
  for (const double x : norm) mean += x / 256.0;
  EXPECT_NEAR(mean, 1.0, 0.03);
  const std::vector<double> router = synthetic_tensor_values(o, {"model.layers.0.mlp.gate.weight", {8, 256}});
  EXPECT_NEAR(rms(router.data(), router.size()), sigma, 0.15 * sigma);
}

TEST(SyntheticModel, LargeModelsAreSharded) {
  TempDir dir;
  ModelOutputOptions out;
  out.max_shard_bytes = 20000;
  const SyntheticModelOptions o = test::tiny_model();
  write_synthetic_model(dir.path() / "m", o, out);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "m" / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "m" / "model.safetensors"));
  const SafetensorsModel sharded = SafetensorsModel::open((dir.path() / "m").string());
  EXPECT_GT(sharded.shards().size(), 3u);
  write_synthetic_model(dir.path() / "single", o);
  const SafetensorsModel single = SafetensorsModel::open((dir.path() / "single").string());
  ASSERT_EQ(sharded.names(), single.names());
  for (const std::string& name : single.names()) {
    const auto a = sharded.tensor(name).bytes(), b = single.tensor(name).bytes();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << name;
  }
}

void expect_error(const SyntheticModelOptions& o, const std::string& fragment) {
  try {
    synthetic_model_tensors(o);
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SyntheticModel, RejectsInvalidOptions) {
  SyntheticModelOptions o;
  o.hidden = 0;
  expect_error(o, "hidden = 0");
  o = {};
  o.experts = -2;
  expect_error(o, "experts = -2");
  o = {};
  o.experts_per_token = 9;
  expect_error(o, "experts_per_token = 9 exceeds experts = 8");
  o = {};
  o.kv_heads = 3;
  expect_error(o, "not a multiple of kv_heads = 3");
  o = {};
  o.dtype = Dtype::f16;
  expect_error(o, "F16");
}

TEST(SyntheticModel, OutputDirectoryRules) {
  TempDir dir;
  const SyntheticModelOptions o = test::tiny_model(1);
  // An existing empty directory is fine.
  std::filesystem::create_directory(dir.path() / "empty");
  write_synthetic_model(dir.path() / "empty", o);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "empty" / "config.json"));
  // A non-empty one is refused and left alone, unless overwriting a model directory.
  const auto before = test::directory_bytes(dir.path() / "empty");
  SyntheticModelOptions other = o;
  other.seed = 2;
  EXPECT_THROW(write_synthetic_model(dir.path() / "empty", other), Error);
  EXPECT_EQ(test::directory_bytes(dir.path() / "empty"), before);
  ModelOutputOptions overwrite;
  overwrite.overwrite = true;
  write_synthetic_model(dir.path() / "empty", other, overwrite);
  EXPECT_NE(test::directory_bytes(dir.path() / "empty"), before);
  // Overwriting never deletes a directory that is not a model.
  std::filesystem::create_directory(dir.path() / "notes");
  std::ofstream(dir.path() / "notes" / "todo.txt") << "keep me";
  try {
    write_synthetic_model(dir.path() / "notes", o, overwrite);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a model directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "notes" / "todo.txt"));
  // A file in the way is an error; nothing is left behind.
  std::ofstream(dir.path() / "file") << "x";
  EXPECT_THROW(write_synthetic_model(dir.path() / "file", o), Error);
  EXPECT_TRUE(test::hidden_entries(dir.path()).empty());
}

}  // namespace
}  // namespace fp4cl
