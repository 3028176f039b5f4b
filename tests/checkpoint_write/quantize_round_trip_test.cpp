// Every scheme × layout: the written checkpoint parses with QuantConfig and resolves each module
// to the requested scheme, holds exactly the producer's tensors (FP4.md §5) with their dtypes and
// shapes, dequantizes within FP4 error of the source with the global scales in the producer's
// direction, keeps everything else bit for bit, and carries the producer's config files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_write/checkpoint_write_test_util.hpp"
#include "checkpoint_write/quantize_test_fixture.hpp"
#include "fp4cl/quant_config.hpp"

namespace fp4cl {
namespace {

struct Combo {
  const char* scheme;
  QuantProducer layout;
};

void PrintTo(const Combo& c, std::ostream* os) { *os << c.scheme << " / " << to_string(c.layout); }

std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(info.param.scheme) +
         (info.param.layout == QuantProducer::modelopt ? "_modelopt" : "_ct");
}

// The tensors FP4.md §5 lists per quantized linear: suffix → (dtype, shape) for weight [N, K].
std::map<std::string, std::pair<Dtype, std::vector<std::int64_t>>> spec_tensors(QuantProducer layout,
                                                                                const QuantScheme& s,
                                                                                std::int64_t n,
                                                                                std::int64_t k) {
  std::map<std::string, std::pair<Dtype, std::vector<std::int64_t>>> t;
  if (layout == QuantProducer::modelopt) {
    t["weight"] = {Dtype::u8, {n, k / 2}};
    t["weight_scale"] = {Dtype::f8_e4m3, {n, k / 16}};
    t["weight_scale_2"] = {Dtype::f32, {}};
    if (!s.w4a16()) t["input_scale"] = {Dtype::f32, {}};
  } else if (s.weight == WeightFormat::nvfp4) {
    t["weight_packed"] = {Dtype::u8, {n, k / 2}};
    t["weight_scale"] = {Dtype::f8_e4m3, {n, k / 16}};
    t["weight_global_scale"] = {Dtype::f32, {1}};
    if (!s.w4a16()) t["input_global_scale"] = {Dtype::f32, {1}};
  } else {
    t["weight_packed"] = {Dtype::u8, {n, k / 2}};
    t["weight_scale"] = {Dtype::u8, {n, k / 32}};
  }
  return t;
}

class QuantizeRoundTrip : public test::QuantizeModelTest, public ::testing::WithParamInterface<Combo> {};

TEST_P(QuantizeRoundTrip, WritesTheProducersCheckpoint) {
  QuantizeOptions o;
  o.scheme = quant_scheme_from_name(GetParam().scheme);
  o.layout = GetParam().layout;
  const auto out = scratch().path() / "q";
  const QuantizeSummary summary = quantize_model(source(), out, o);
  const SafetensorsModel src = SafetensorsModel::open(source().string());
  const SafetensorsModel dst = SafetensorsModel::open(out.string());

  // The config: producer, and every module's scheme.
  const QuantConfig config = QuantConfig::load(out);
  EXPECT_EQ(config.producer(), o.layout);
  const std::set<std::string> ignored(summary.ignored.begin(), summary.ignored.end());
  EXPECT_EQ(ignored, expected_ignored());
  std::set<std::string> expected_names;
  std::size_t modules = 0;
  for (const std::string& name : src.names()) {
    const TensorView s = src.tensor(name);
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const bool linear = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                        s.shape().size() == 2 && module.find("embed") == std::string::npos;
    if (linear) {
      const std::optional<QuantScheme> resolved = config.resolve(module);
      if (ignored.count(module)) {
        EXPECT_FALSE(resolved.has_value()) << module;
      } else {
        ASSERT_TRUE(resolved.has_value()) << module;
        EXPECT_EQ(*resolved, o.scheme) << module;
      }
    }
    if (!linear || ignored.count(module)) {
      // Kept as it was, bit for bit.
      expected_names.insert(name);
      const std::optional<TensorView> d = dst.find(name);
      ASSERT_TRUE(d.has_value()) << name;
      EXPECT_EQ(d->dtype(), s.dtype()) << name;
      EXPECT_EQ(d->shape(), s.shape()) << name;
      EXPECT_TRUE(std::equal(s.bytes().begin(), s.bytes().end(), d->bytes().begin(), d->bytes().end()))
          << name;
      continue;
    }
    ++modules;
    const std::int64_t n = s.shape()[0], k = s.shape()[1];
    const auto spec = spec_tensors(o.layout, o.scheme, n, k);
    // The layout table the reader uses names exactly these tensors.
    const TensorLayout layout = config.layout(*config.resolve(module));
    std::set<std::string> from_layout;
    for (const std::string* suffix :
         {&layout.weight, &layout.weight_scale, &layout.weight_global_scale, &layout.input_global_scale}) {
      if (!suffix->empty()) from_layout.insert(*suffix);
    }
    std::set<std::string> from_spec;
    for (const auto& entry : spec) from_spec.insert(entry.first);
    EXPECT_EQ(from_layout, from_spec) << module;
    for (const auto& [suffix, dtype_shape] : spec) {
      const std::string tensor = module + "." + suffix;
      expected_names.insert(tensor);
      const std::optional<TensorView> d = dst.find(tensor);
      ASSERT_TRUE(d.has_value()) << tensor;
      EXPECT_EQ(d->dtype(), dtype_shape.first) << tensor;
      EXPECT_EQ(d->shape(), dtype_shape.second) << tensor;
    }

    // Dequantize with the stored scales in the producer's direction.
    const std::vector<float> values = test::float_values(s);
    float amax = 0;
    for (const float v : values) amax = std::max(amax, std::fabs(v));
    QuantizedRows q;
    q.format = o.scheme.weight;
    q.rows = n;
    q.cols = k;
    q.packed = dst.tensor(module + "." + layout.weight).to_vector<std::uint8_t>();
    q.scales =
        dst.tensor(module + "." + layout.weight_scale)
            .to_vector<std::uint8_t>(o.scheme.weight == WeightFormat::nvfp4 ? Dtype::f8_e4m3 : Dtype::u8);
    float gs_d = 1.0f;
    if (o.scheme.weight == WeightFormat::nvfp4) {
      const float stored = dst.tensor(module + "." + layout.weight_global_scale).scalar_f32();
      if (o.layout == QuantProducer::modelopt) {
        EXPECT_NEAR(stored, amax / 2688.0f, 1e-6 * amax / 2688.0f)
            << module << ": weight_scale_2 = amax/(448·6)";
        gs_d = stored;
      } else {
        EXPECT_EQ(stored, 2688.0f / amax) << module << ": weight_global_scale = 448·6/amax";
        gs_d = 1.0f / stored;
      }
    }
    q.global_scale = gs_d;
    EXPECT_EQ(test::expect_within_fp4_error(module, values, q, gs_d), 0);
    if (!layout.input_global_scale.empty()) {
      const float input = dst.tensor(module + "." + layout.input_global_scale).scalar_f32();
      EXPECT_TRUE(std::isfinite(input) && input > 0.0f) << module;
    }
  }
  EXPECT_EQ(modules, summary.quantized.size());
  EXPECT_EQ(modules, 2u * (4u + 3u * 4u));  // per layer: q, k, v, o and 4 experts × gate, up, down
  const std::vector<std::string> names = dst.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected_names);
  EXPECT_EQ(dst.shards().at(0).metadata().at("format"), "pt");
}

TEST_P(QuantizeRoundTrip, WritesTheProducersConfigFiles) {
  QuantizeOptions o;
  o.scheme = quant_scheme_from_name(GetParam().scheme);
  o.layout = GetParam().layout;
  const auto out = scratch().path() / "q";
  const QuantizeSummary summary = quantize_model(source(), out, o);

  // config.json: the source's fields unchanged, plus quantization_config.
  const nlohmann::json src = nlohmann::json::parse(test::file_bytes(source() / "config.json"));
  const nlohmann::json dst = nlohmann::json::parse(test::file_bytes(out / "config.json"));
  for (const auto& [key, value] : src.items()) EXPECT_EQ(dst.at(key), value) << key;
  EXPECT_EQ(dst.size(), src.size() + 1);
  const nlohmann::json& qc = dst.at("quantization_config");
  const std::vector<std::string> ignored(expected_ignored().begin(), expected_ignored().end());  // sorted
  const bool nv = o.scheme.weight == WeightFormat::nvfp4;
  if (o.layout == QuantProducer::modelopt) {
    const char* algo = o.scheme.w4a16() ? "W4A16_NVFP4" : "NVFP4";
    EXPECT_EQ(qc.at("quant_method"), "modelopt");
    EXPECT_EQ(qc.at("quant_algo"), algo);
    EXPECT_EQ(qc.at("ignore"), ignored);
    EXPECT_EQ(qc.at("producer").at("name"), "modelopt");
    EXPECT_EQ(qc.contains("config_groups"), !o.scheme.w4a16());
    if (!o.scheme.w4a16()) {
      const nlohmann::json& g = qc.at("config_groups").at("group_0");
      EXPECT_EQ(g.at("targets"), nlohmann::json::array({"Linear"}));
      for (const char* args : {"weights", "input_activations"}) {
        EXPECT_EQ(g.at(args).at("num_bits"), 4);
        EXPECT_EQ(g.at(args).at("type"), "float");
        EXPECT_EQ(g.at(args).at("group_size"), 16);
        EXPECT_EQ(g.at(args).at("dynamic"), false);
      }
    }
    const nlohmann::json hf = nlohmann::json::parse(test::file_bytes(out / "hf_quant_config.json"));
    EXPECT_EQ(hf.at("producer").at("name"), "modelopt");
    const nlohmann::json& q = hf.at("quantization");
    EXPECT_EQ(q.at("quant_algo"), algo);
    EXPECT_EQ(q.at("group_size"), 16);
    EXPECT_TRUE(q.at("kv_cache_quant_algo").is_null());
    EXPECT_EQ(q.at("exclude_modules"), ignored);
  } else {
    EXPECT_FALSE(std::filesystem::exists(out / "hf_quant_config.json"));
    const char* format = nv ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
    EXPECT_EQ(qc.at("quant_method"), "compressed-tensors");
    EXPECT_EQ(qc.at("format"), format);
    EXPECT_EQ(qc.at("quantization_status"), "compressed");
    EXPECT_TRUE(qc.at("version").is_string());
    EXPECT_EQ(qc.at("ignore"), ignored);
    EXPECT_TRUE(qc.at("kv_cache_scheme").is_null());
    EXPECT_EQ(qc.at("sparsity_config"), nlohmann::json::object());
    const nlohmann::json& g = qc.at("config_groups").at("group_0");
    EXPECT_EQ(g.at("format"), format);
    EXPECT_EQ(g.at("targets"), nlohmann::json::array({"Linear"}));
    EXPECT_TRUE(g.at("output_activations").is_null());
    const nlohmann::json& w = g.at("weights");
    EXPECT_EQ(w.at("num_bits"), 4);
    EXPECT_EQ(w.at("type"), "float");
    EXPECT_EQ(w.at("strategy"), nv ? "tensor_group" : "group");
    EXPECT_EQ(w.at("group_size"), nv ? 16 : 32);
    EXPECT_EQ(w.at("symmetric"), true);
    EXPECT_EQ(w.at("dynamic"), false);
    EXPECT_EQ(w.at("scale_dtype"), nv ? "torch.float8_e4m3fn" : "torch.uint8");
    const nlohmann::json& a = g.at("input_activations");
    if (o.scheme.w4a16()) {
      EXPECT_TRUE(a.is_null());
    } else {
      EXPECT_EQ(a.at("num_bits"), 4);
      EXPECT_EQ(a.at("strategy"), w.at("strategy"));
      EXPECT_EQ(a.at("group_size"), w.at("group_size"));
      EXPECT_EQ(a.at("dynamic"), nv ? nlohmann::json("local") : nlohmann::json(true));
    }
  }
  // Other top-level files are copied as they are; subdirectories are not.
  EXPECT_EQ(test::file_bytes(out / "tokenizer.json"), test::file_bytes(source() / "tokenizer.json"));
  EXPECT_EQ(test::file_bytes(out / "generation_config.json"),
            test::file_bytes(source() / "generation_config.json"));
  EXPECT_FALSE(std::filesystem::exists(out / "original"));
  const std::set<std::string> files(summary.files.begin(), summary.files.end());
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::directory_iterator(out)) on_disk.insert(e.path().filename().string());
  EXPECT_EQ(files, on_disk);
  EXPECT_TRUE(test::hidden_entries(scratch().path()).empty());
}

INSTANTIATE_TEST_SUITE_P(AllSchemesAndLayouts, QuantizeRoundTrip,
                         ::testing::Values(Combo{"nvfp4", QuantProducer::modelopt},
                                           Combo{"nvfp4a16", QuantProducer::modelopt},
                                           Combo{"nvfp4", QuantProducer::compressed_tensors},
                                           Combo{"nvfp4a16", QuantProducer::compressed_tensors},
                                           Combo{"mxfp4", QuantProducer::compressed_tensors},
                                           Combo{"mxfp4a16", QuantProducer::compressed_tensors}),
                         combo_name);

}  // namespace
}  // namespace fp4cl
