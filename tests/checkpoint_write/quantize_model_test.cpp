// The quantizer beyond the round trip: activation scales (fixed and calibrated), determinism,
// F32 sources, sharding, module selection, names, and every error leaving the output untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/activation_calibration.hpp"
#include "checkpoint/portable_math.hpp"
#include "checkpoint_write/checkpoint_write_test_util.hpp"
#include "checkpoint_write/quantize_test_fixture.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/quant_config.hpp"
#include "support/errors.hpp"

namespace fp4cl {
namespace {

using test::QuantizeModelTest;

QuantizeOptions options(const char* scheme, QuantProducer layout) {
  QuantizeOptions o;
  o.scheme = quant_scheme_from_name(scheme);
  o.layout = layout;
  return o;
}

using test::error_of;

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)

TEST_F(QuantizeModelTest, FixedInputAmaxIsWrittenInEachProducersDirection) {
  const SafetensorsModel src = SafetensorsModel::open(source().string());
  for (const QuantProducer layout : {QuantProducer::modelopt, QuantProducer::compressed_tensors}) {
    QuantizeOptions o = options("nvfp4", layout);
    o.input_amax = 3.5f;
    const auto out = scratch().path() / to_string(layout);
    const QuantizeSummary summary = quantize_model(source(), out, o);
    const SafetensorsModel dst = SafetensorsModel::open(out.string());
    for (const std::string& module : summary.quantized) {
      if (layout == QuantProducer::modelopt) {
        EXPECT_EQ(dst.tensor(module + ".input_scale").scalar_f32(), 3.5f / 2688.0f) << module;
      } else {
        EXPECT_EQ(dst.tensor(module + ".input_global_scale").scalar_f32(), 2688.0f / 3.5f) << module;
      }
    }
  }
}

float amax_of(const std::vector<float>& v) {
  float a = 0;
  for (const float x : v) a = std::max(a, std::fabs(x));
  return a;
}

float bf16_round(double x) { return bf16_to_float(float_to_bf16(static_cast<float>(x))); }

// bf16(x · Wᵀ) over the calibration rows.
std::vector<float> project(const std::vector<float>& x, std::int64_t rows, const TensorView& w) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  const std::vector<float> wv = test::float_values(w);
  std::vector<float> y;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        acc += static_cast<double>(x[static_cast<std::size_t>(r * k + i)]) *
               wv[static_cast<std::size_t>(j * k + i)];
      }
      y.push_back(bf16_round(acc));
    }
  }
  return y;
}

TEST_F(QuantizeModelTest, CalibratedInputScalesFollowEachModulesInput) {
  QuantizeOptions o = options("nvfp4", QuantProducer::compressed_tensors);
  o.calibration_rows = 8;
  o.calibration_seed = 5;
  const auto out = scratch().path() / "q";
  quantize_model(source(), out, o);
  const SafetensorsModel src = SafetensorsModel::open(source().string());
  const SafetensorsModel dst = SafetensorsModel::open(out.string());
  auto stored_amax = [&](const std::string& module) {
    return 2688.0f / dst.tensor(module + ".input_global_scale").scalar_f32();
  };
  detail::ActivationCalibration calibration(src, 8, 5);
  const std::vector<float>& x = calibration.inputs(64);
  ASSERT_EQ(x.size(), 8u * 64u);
  // Modules fed by hidden states see the synthetic rows themselves.
  const std::string expert = "model.layers.1.mlp.experts.2.";
  for (const std::string& m :
       {expert + "gate_proj", expert + "up_proj", std::string("model.layers.0.self_attn.q_proj")}) {
    EXPECT_NEAR(stored_amax(m), amax_of(x), 1e-5f * amax_of(x)) << m;
  }
  // down_proj sees silu(gate) × up of its own expert (computed here with std::exp).
  const std::vector<float> g = project(x, 8, src.tensor(expert + "gate_proj.weight"));
  const std::vector<float> u = project(x, 8, src.tensor(expert + "up_proj.weight"));
  std::vector<float> a;
  for (std::size_t i = 0; i < g.size(); ++i)
    a.push_back(bf16_round(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]));
  EXPECT_NEAR(stored_amax(expert + "down_proj"), amax_of(a), 0.01f * amax_of(a));
  EXPECT_GT(std::fabs(stored_amax(expert + "down_proj") - amax_of(x)), 0.05f * amax_of(x))
      << "down_proj should not see the hidden-state rows";
  // o_proj sees the value projection.
  const std::vector<float> v = project(x, 8, src.tensor("model.layers.0.self_attn.v_proj.weight"));
  EXPECT_NEAR(stored_amax("model.layers.0.self_attn.o_proj"), amax_of(v), 1e-5f * amax_of(v));
  // Different experts get different scales.
  EXPECT_NE(stored_amax("model.layers.1.mlp.experts.0.down_proj"), stored_amax(expert + "down_proj"));
}

TEST_F(QuantizeModelTest, SameInputGivesIdenticalBytes) {
  for (const char* scheme : {"nvfp4", "mxfp4"}) {
    const QuantizeOptions o = options(scheme, QuantProducer::compressed_tensors);
    quantize_model(source(), scratch().path() / "a", o);
    quantize_model(source(), scratch().path() / "b", o);
    EXPECT_EQ(test::directory_bytes(scratch().path() / "a"), test::directory_bytes(scratch().path() / "b"))
        << scheme;
    std::filesystem::remove_all(scratch().path() / "a");
    std::filesystem::remove_all(scratch().path() / "b");
  }
}

TEST_F(QuantizeModelTest, QuantizesF32Sources) {
  SyntheticModelOptions m = test::tiny_model(21);
  m.dtype = Dtype::f32;
  write_synthetic_model(scratch().path() / "f32", m);
  for (const char* scheme : {"nvfp4", "mxfp4"}) {
    const auto out = scratch().path() / scheme;
    quantize_model(scratch().path() / "f32", out, options(scheme, QuantProducer::compressed_tensors));
    const SafetensorsModel src = SafetensorsModel::open((scratch().path() / "f32").string());
    const SafetensorsModel dst = SafetensorsModel::open(out.string());
    const std::string module = "model.layers.0.mlp.experts.1.down_proj";
    const TensorView w = src.tensor(module + ".weight");
    const std::vector<float> values = test::float_values(w);
    QuantizedRows q;
    q.format = quant_scheme_from_name(scheme).weight;
    q.rows = w.shape()[0];
    q.cols = w.shape()[1];
    q.packed = dst.tensor(module + ".weight_packed").to_vector<std::uint8_t>();
    q.scales = dst.tensor(module + ".weight_scale")
                   .to_vector<std::uint8_t>(q.format == WeightFormat::nvfp4 ? Dtype::f8_e4m3 : Dtype::u8);
    q.global_scale = q.format == WeightFormat::nvfp4
                         ? 1.0f / dst.tensor(module + ".weight_global_scale").scalar_f32()
                         : 1.0f;
    EXPECT_EQ(test::expect_within_fp4_error(module, values, q, q.global_scale), 0) << scheme;
    EXPECT_EQ(dst.tensor("model.norm.weight").dtype(), Dtype::f32);  // kept as it was
  }
}

TEST_F(QuantizeModelTest, LargeCheckpointsAreShardedWithTheSameTensors) {
  const QuantizeOptions o = options("nvfp4", QuantProducer::modelopt);
  quantize_model(source(), scratch().path() / "single", o);
  ModelOutputOptions out;
  out.max_shard_bytes = 8192;
  const QuantizeSummary summary = quantize_model(source(), scratch().path() / "sharded", o, out);
  EXPECT_TRUE(std::find(summary.files.begin(), summary.files.end(), "model.safetensors.index.json") !=
              summary.files.end());
  const SafetensorsModel single = SafetensorsModel::open((scratch().path() / "single").string());
  const SafetensorsModel sharded = SafetensorsModel::open((scratch().path() / "sharded").string());
  EXPECT_EQ(single.shards().size(), 1u);
  EXPECT_GT(sharded.shards().size(), 2u);
  ASSERT_EQ(single.names(), sharded.names());
  for (const std::string& name : single.names()) {
    const auto a = single.tensor(name).bytes(), b = sharded.tensor(name).bytes();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << name;
  }
  EXPECT_EQ(QuantConfig::load(scratch().path() / "sharded").resolve("model.layers.0.self_attn.q_proj"),
            std::optional<QuantScheme>(o.scheme));
}

TEST_F(QuantizeModelTest, IncludeAndExcludeChooseTheModules) {
  QuantizeOptions o = options("mxfp4a16", QuantProducer::compressed_tensors);
  o.exclude = {"*self_attn*", "model.layers.1.mlp.experts.3.*"};
  const auto out = scratch().path() / "q";
  const QuantizeSummary summary = quantize_model(source(), out, o);
  EXPECT_EQ(summary.quantized.size(), 2u * 3u * 4u - 3u);
  const QuantConfig config = QuantConfig::load(out);
  EXPECT_FALSE(config.resolve("model.layers.0.self_attn.k_proj").has_value());
  EXPECT_FALSE(config.resolve("model.layers.1.mlp.experts.3.up_proj").has_value());
  EXPECT_TRUE(config.resolve("model.layers.1.mlp.experts.2.up_proj").has_value());
  const SafetensorsModel dst = SafetensorsModel::open(out.string());
  EXPECT_EQ(dst.tensor("model.layers.0.self_attn.k_proj.weight").dtype(), Dtype::bf16);
  EXPECT_FALSE(dst.contains("model.layers.0.self_attn.k_proj.weight_packed"));
  // Ignored modules are listed in natural order: layer 0 before layer 1, expert 2 before 10.
  const nlohmann::json qc =
      nlohmann::json::parse(test::file_bytes(out / "config.json")).at("quantization_config");
  const std::vector<std::string> ignore = qc.at("ignore");
  EXPECT_EQ(ignore.size(), summary.ignored.size());
  EXPECT_EQ(ignore.front(), "lm_head");
  EXPECT_EQ(ignore.at(1), "model.layers.0.mlp.gate");
  EXPECT_EQ(ignore.at(2), "model.layers.0.self_attn.k_proj");
  // Only modules can be listed: a pattern matching nothing quantizes nothing, which is an error.
  o.include = {"*.nothing"};
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), scratch().path() / "none", o); }),
                  "nothing to quantize");
}

TEST_F(QuantizeModelTest, ModelOptWithMxfp4IsAnError) {
  for (const char* scheme : {"mxfp4", "mxfp4a16"}) {
    const std::string m = error_of(
        [&] { quantize_model(source(), scratch().path() / "q", options(scheme, QuantProducer::modelopt)); });
    EXPECT_CONTAINS(m, "ModelOpt");
    EXPECT_CONTAINS(m, "MXFP4");
    EXPECT_CONTAINS(m, "compressed-tensors");
    EXPECT_FALSE(std::filesystem::exists(scratch().path() / "q"));
  }
}

TEST_F(QuantizeModelTest, ErrorsNameTheProblemAndLeaveTheOutputUntouched) {
  const QuantizeOptions o = options("nvfp4", QuantProducer::compressed_tensors);
  const auto out = scratch().path() / "q";
  // Quantizing a quantized model.
  quantize_model(source(), out, o);
  EXPECT_CONTAINS(error_of([&] { quantize_model(out, scratch().path() / "again", o); }), "quantized already");
  // An output that exists and is not empty, or is the input.
  const auto before = test::directory_bytes(out);
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), out, o); }), "not empty");
  EXPECT_EQ(test::directory_bytes(out), before);
  ModelOutputOptions overwrite;
  overwrite.overwrite = true;
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), source(), o, overwrite); }), "is or contains the input");
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), source().parent_path(), o, overwrite); }),
                  "is or contains the input");
  // A module whose in_features does not fit the block: MXFP4 needs 32, hidden is 48.
  SyntheticModelOptions narrow = test::tiny_model();
  narrow.hidden = 48;
  write_synthetic_model(scratch().path() / "narrow", narrow);
  const std::string m = error_of([&] {
    quantize_model(scratch().path() / "narrow", scratch().path() / "narrow-q",
                   options("mxfp4", QuantProducer::compressed_tensors));
  });
  EXPECT_CONTAINS(m, "in_features = 48");
  EXPECT_CONTAINS(m, "_proj.weight");
  EXPECT_FALSE(std::filesystem::exists(scratch().path() / "narrow-q"));
  // Bad options and inputs.
  QuantizeOptions bad = o;
  bad.input_amax = -1.0f;
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), scratch().path() / "x", bad); }), "input amax");
  bad = o;
  bad.calibration_rows = 0;
  EXPECT_CONTAINS(error_of([&] { quantize_model(source(), scratch().path() / "x", bad); }),
                  "calibration rows");
  EXPECT_CONTAINS(error_of([&] { quantize_model(scratch().path() / "missing", scratch().path() / "x", o); }),
                  "not a directory");
  std::filesystem::create_directory(scratch().path() / "no-config");
  EXPECT_CONTAINS(
      error_of([&] { quantize_model(scratch().path() / "no-config", scratch().path() / "x", o); }),
      "no config.json");
  EXPECT_FALSE(std::filesystem::exists(scratch().path() / "x"));
  EXPECT_TRUE(test::hidden_entries(scratch().path()).empty());
}

TEST(QuantizeNames, SchemeAndLayoutNames) {
  EXPECT_EQ(quant_scheme_from_name("nvfp4"), (QuantScheme{WeightFormat::nvfp4, Activations::fp4_dynamic}));
  EXPECT_EQ(quant_scheme_from_name("NVFP4A16"), (QuantScheme{WeightFormat::nvfp4, Activations::bf16}));
  EXPECT_EQ(quant_scheme_from_name("mxfp4"), (QuantScheme{WeightFormat::mxfp4, Activations::fp4_dynamic}));
  EXPECT_EQ(quant_scheme_from_name("MxFp4A16"), (QuantScheme{WeightFormat::mxfp4, Activations::bf16}));
  EXPECT_CONTAINS(error_of([] { quant_scheme_from_name("fp8"); }), "nvfp4, nvfp4a16, mxfp4 or mxfp4a16");
  EXPECT_EQ(quant_producer_from_name("modelopt"), QuantProducer::modelopt);
  EXPECT_EQ(quant_producer_from_name("compressed-tensors"), QuantProducer::compressed_tensors);
  EXPECT_CONTAINS(error_of([] { quant_producer_from_name("gguf"); }), "modelopt or compressed-tensors");
}

}  // namespace
}  // namespace fp4cl
