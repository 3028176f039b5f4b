// Building and writing the test checkpoints of checkpoint_fixture.hpp.
#include "checkpoint_fixture.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace fp4cl::test {

namespace {

using Json = nlohmann::json;

// splitmix64: a small deterministic generator, the same on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() { return static_cast<float>(next() >> 40) * 0x1p-23f - 1.0f; }

 private:
  std::uint64_t state_;
};

std::uint64_t hash_name(const std::string& s, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

constexpr float kE4m3TimesE2m1Max = 448.0f * 6.0f;

float round_down_to_power_of_two(float x) {
  int e = 0;
  std::frexp(x, &e);  // x = m · 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, e - 1);
}

// BF16 weights [rows, cols] with the patterns real checkpoints contain: all-zero blocks (zero
// block scales) and tiny negative values (negative-zero codes 0x8).
std::vector<std::uint16_t> weight_values(Rng& rng, std::int64_t rows, std::int64_t cols, int block) {
  const float amplitude = 0.05f * static_cast<float>(1 + rng.next() % 40);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      float x = amplitude * rng.symmetric();
      if (c % 13 == 5) x = -amplitude * 1e-4f;
      if (r % 5 == 3 && c < block) x = 0.0f;
      out[static_cast<std::size_t>(r * cols + c)] = float_to_bf16(x);
    }
  }
  return out;
}

float amax_of(const std::vector<std::uint16_t>& bf16) {
  float m = 0.0f;
  for (std::uint16_t v : bf16) m = std::max(m, std::fabs(bf16_to_float(v)));
  return m;
}

std::vector<std::uint8_t> f32_bytes(float v) {
  std::vector<std::uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

std::vector<std::uint8_t> bf16_tensor(Rng& rng, std::int64_t count) {
  std::vector<std::uint8_t> b(static_cast<std::size_t>(2 * count));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint16_t v = float_to_bf16(rng.symmetric());
    std::memcpy(&b[static_cast<std::size_t>(2 * i)], &v, 2);
  }
  return b;
}

// "model.layers.3" from "model.layers.3.self_attn.q_proj".
std::string decoder_layer(const std::string& module) {
  const std::size_t at = module.find("layers.");
  if (at == std::string::npos) return "";
  std::size_t end = at + 7;
  while (end < module.size() && std::isdigit(static_cast<unsigned char>(module[end]))) ++end;
  return module.substr(0, end);
}

const char* router_name(ExpertStyle style) {
  return style == ExpertStyle::qwen3 ? "mlp.gate" : "block_sparse_moe.gate";
}

// ------------------------------------------------------------------ config JSON, per producer

Json model_config(const ModelSpec& spec) {
  std::set<std::string> layers;
  for (const auto& l : spec.linears) layers.insert(decoder_layer(l.module));
  for (const auto& m : spec.moes) layers.insert(m.prefix);
  Json c;
  c["hidden_size"] = spec.hidden;
  c["num_hidden_layers"] = layers.size();
  c["torch_dtype"] = "bfloat16";
  c["vocab_size"] = 32;
  c["transformers_version"] = "4.55.0";
  if (spec.moes.empty()) {
    c["architectures"] = {"LlamaForCausalLM"};
    c["model_type"] = "llama";
  } else if (spec.expert_style == ExpertStyle::qwen3) {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
    c["model_type"] = "qwen3_moe";
    c["num_experts"] = spec.moes.front().experts;
    c["num_experts_per_tok"] = 2;
    c["moe_intermediate_size"] = spec.moes.front().intermediate;
    c["norm_topk_prob"] = true;
  } else {
    c["architectures"] = {"MixtralForCausalLM"};
    c["model_type"] = "mixtral";
    c["num_local_experts"] = spec.moes.front().experts;
    c["num_experts_per_tok"] = 2;
    c["intermediate_size"] = spec.moes.front().intermediate;
  }
  return c;
}

Json modelopt_exclusions(const ModelSpec& spec) {
  return {"lm_head", std::string("*") + router_name(spec.expert_style)};
}

// hf_quant_config.json as ModelOpt's export writes it.
Json modelopt_hf_quant_config(const ModelSpec& spec) {
  return {{"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
          {"quantization",
           {{"quant_algo", spec.scheme.w4a16() ? "W4A16_NVFP4" : "NVFP4"},
            {"kv_cache_quant_algo", nullptr},
            {"group_size", 16},
            {"exclude_modules", modelopt_exclusions(spec)}}}};
}

// config.json's quantization_config as ModelOpt's convert_hf_quant_config_format writes it.
Json modelopt_quantization_config(const ModelSpec& spec) {
  const Json args = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  Json group = {{"weights", args}, {"targets", {"Linear"}}};
  if (!spec.scheme.w4a16()) group["input_activations"] = args;
  return {{"quant_method", "modelopt"},          {"quant_algo", spec.scheme.w4a16() ? "W4A16_NVFP4" : "NVFP4"},
          {"kv_cache_scheme", nullptr},          {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
          {"ignore", modelopt_exclusions(spec)}, {"config_groups", {{"group_0", group}}}};
}

// config.json's quantization_config as llm-compressor writes it (NVFP4, NVFP4A16, MXFP4, MXFP4A16).
Json compressed_tensors_quantization_config(const ModelSpec& spec) {
  const bool nvfp4 = spec.scheme.weight == WeightFormat::nvfp4;
  const std::string format = nvfp4 ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
  Json weights = {{"actorder", nullptr},
                  {"block_structure", nullptr},
                  {"dynamic", false},
                  {"group_size", nvfp4 ? 16 : 32},
                  {"num_bits", 4},
                  {"observer", nvfp4 ? "static_minmax" : "minmax"},
                  {"observer_kwargs", Json::object()},
                  {"strategy", nvfp4 ? "tensor_group" : "group"},
                  {"symmetric", true},
                  {"type", "float"}};
  if (!nvfp4) {
    weights["scale_dtype"] = "torch.uint8";
    weights["zp_dtype"] = nullptr;
  }
  Json inputs = nullptr;
  if (!spec.scheme.w4a16()) {
    inputs = weights;
    inputs["dynamic"] = nvfp4 ? Json("local") : Json(true);
    inputs["observer"] = nvfp4 ? Json("static_minmax") : Json(nullptr);
  }
  const Json group = {{"format", format},
                      {"input_activations", inputs},
                      {"output_activations", nullptr},
                      {"targets", {"Linear"}},
                      {"weights", weights}};
  return {{"config_groups", {{"group_0", group}}},
          {"format", format},
          {"global_compression_ratio", nullptr},
          {"ignore", {"lm_head", std::string("re:.*") + router_name(spec.expert_style) + "$"}},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"sparsity_config", Json::object()},
          {"transform_config", Json::object()},
          {"version", "0.11.0"}};
}

}  // namespace

const char* to_string(Layout layout) { return layout == Layout::modelopt ? "ModelOpt" : "compressed-tensors"; }

std::string expert_module(ExpertStyle style, const std::string& prefix, std::int64_t expert, int projection) {
  static const char* const qwen3[] = {"gate_proj", "up_proj", "down_proj"};
  static const char* const mixtral[] = {"w1", "w3", "w2"};
  return moe_layer_name(style, prefix) + "." + std::to_string(expert) + "." +
         (style == ExpertStyle::qwen3 ? qwen3 : mixtral)[projection];
}

std::string moe_layer_name(ExpertStyle style, const std::string& prefix) {
  return prefix + (style == ExpertStyle::qwen3 ? ".mlp.experts" : ".block_sparse_moe.experts");
}

namespace {

// The attention projections of decoder layer `prefix` (k and v at half width).
void add_attention(ModelSpec& s, const std::string& prefix, std::int64_t hidden) {
  s.linears.push_back({prefix + ".self_attn.q_proj", hidden, hidden});
  s.linears.push_back({prefix + ".self_attn.k_proj", hidden / 2, hidden});
  s.linears.push_back({prefix + ".self_attn.v_proj", hidden / 2, hidden});
  s.linears.push_back({prefix + ".self_attn.o_proj", hidden, hidden});
}

}  // namespace

ModelSpec moe_model(Layout layout, const QuantScheme& scheme, int layers, std::int64_t experts, std::int64_t hidden,
                    std::int64_t intermediate, ExpertStyle style) {
  ModelSpec s;
  s.layout = layout;
  s.scheme = scheme;
  s.expert_style = style;
  s.hidden = hidden;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add_attention(s, p, hidden);
    s.moes.push_back({p, experts, hidden, intermediate});
  }
  return s;
}

ModelSpec dense_model(Layout layout, const QuantScheme& scheme, int layers, std::int64_t hidden,
                      std::int64_t intermediate) {
  ModelSpec s;
  s.layout = layout;
  s.scheme = scheme;
  s.hidden = hidden;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add_attention(s, p, hidden);
    s.linears.push_back({p + ".mlp.gate_proj", intermediate, hidden});
    s.linears.push_back({p + ".mlp.up_proj", intermediate, hidden});
    s.linears.push_back({p + ".mlp.down_proj", hidden, intermediate});
  }
  return s;
}

std::string FixtureCheckpoint::weight_name(const std::string& module) const {
  return module + (spec_.layout == Layout::modelopt ? ".weight" : ".weight_packed");
}
std::string FixtureCheckpoint::scale_name(const std::string& module) const { return module + ".weight_scale"; }
std::string FixtureCheckpoint::global_scale_name(const std::string& module) const {
  return module + (spec_.layout == Layout::modelopt ? ".weight_scale_2" : ".weight_global_scale");
}
std::string FixtureCheckpoint::input_scale_name(const std::string& module) const {
  return module + (spec_.layout == Layout::modelopt ? ".input_scale" : ".input_global_scale");
}

const ExpectedModule& FixtureCheckpoint::expected(const std::string& module) const {
  const auto it = modules.find(module);
  if (it == modules.end()) throw std::runtime_error("fixture has no module " + module);
  return it->second;
}

FixtureCheckpoint FixtureCheckpoint::build(const ModelSpec& spec) {
  if (spec.layout == Layout::modelopt && spec.scheme.weight == WeightFormat::mxfp4) {
    throw std::runtime_error("ModelOpt writes no MXFP4 checkpoints");
  }
  FixtureCheckpoint f;
  f.spec_ = spec;
  const bool nvfp4 = spec.scheme.weight == WeightFormat::nvfp4;
  const std::vector<std::int64_t> scalar_shape =
      spec.layout == Layout::modelopt ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1};
  auto pick = [&](float calibrated) {
    return spec.scales == ScaleChoice::power_of_two ? round_down_to_power_of_two(calibrated) : calibrated;
  };
  // The stored form of a quant-direction scale: ModelOpt writes gs_d = 1/gs_q, compressed-tensors gs_q.
  auto stored = [&](float gs_quant) { return spec.layout == Layout::modelopt ? 1.0f / gs_quant : gs_quant; };

  // One quantized module; `input_amax` is its activations' calibrated amax.
  auto add_module = [&](const std::string& module, std::int64_t rows, std::int64_t cols, float input_amax) {
    Rng rng(hash_name(module, spec.seed));
    const std::vector<std::uint16_t> bf16 = weight_values(rng, rows, cols, spec.scheme.block_size());
    ExpectedModule e;
    if (nvfp4) {
      e.weight_gs_quant = pick(kE4m3TimesE2m1Max / amax_of(bf16));
      e.input_gs_quant = pick(kE4m3TimesE2m1Max / input_amax);
    }
    e.weight = quantize(spec.scheme.weight, bf16, rows, cols, e.weight_gs_quant);
    f.tensors[f.weight_name(module)] = {Dtype::u8, {rows, cols / 2}, e.weight.packed};
    f.tensors[f.scale_name(module)] = {
        nvfp4 ? Dtype::f8_e4m3 : Dtype::u8, {rows, e.weight.scale_cols()}, e.weight.scales};
    if (nvfp4) {
      f.tensors[f.global_scale_name(module)] = {Dtype::f32, scalar_shape, f32_bytes(stored(e.weight_gs_quant))};
      if (!spec.scheme.w4a16() || spec.activation_scales_in_w4a16) {
        f.tensors[f.input_scale_name(module)] = {Dtype::f32, scalar_shape, f32_bytes(stored(e.input_gs_quant))};
      }
    }
    f.modules[module] = std::move(e);
  };

  Rng rng(spec.seed);
  auto input_amax = [&]() { return 0.5f + static_cast<float>(rng.next() % 64) / 8.0f; };
  std::set<std::string> decoder_layers;
  for (const LinearSpec& l : spec.linears) {
    add_module(l.module, l.out_features, l.in_features, input_amax());
    decoder_layers.insert(decoder_layer(l.module));
  }
  for (const MoeSpec& m : spec.moes) {
    decoder_layers.insert(m.prefix);
    for (std::int64_t e = 0; e < m.experts; ++e) {
      // Gate and up see the same input; their calibrations agree for even experts, not for odd ones.
      const float fc1_amax = input_amax();
      add_module(expert_module(spec.expert_style, m.prefix, e, 0), m.intermediate, m.hidden, fc1_amax);
      add_module(expert_module(spec.expert_style, m.prefix, e, 1), m.intermediate, m.hidden,
                 e % 2 == 0 ? fc1_amax : input_amax());
      add_module(expert_module(spec.expert_style, m.prefix, e, 2), m.hidden, m.intermediate, input_amax());
    }
    f.tensors[m.prefix + "." + router_name(spec.expert_style) + ".weight"] = {
        Dtype::bf16, {m.experts, m.hidden}, bf16_tensor(rng, m.experts * m.hidden)};
  }
  // The unquantized rest of a model: what discovery must leave alone.
  const std::int64_t H = spec.hidden;
  f.tensors["model.embed_tokens.weight"] = {Dtype::bf16, {32, H}, bf16_tensor(rng, 32 * H)};
  f.tensors["lm_head.weight"] = {Dtype::bf16, {32, H}, bf16_tensor(rng, 32 * H)};
  f.tensors["model.norm.weight"] = {Dtype::bf16, {H}, bf16_tensor(rng, H)};
  for (const std::string& p : decoder_layers) {
    f.tensors[p + ".input_layernorm.weight"] = {Dtype::bf16, {H}, bf16_tensor(rng, H)};
    f.tensors[p + ".post_attention_layernorm.weight"] = {Dtype::bf16, {H}, bf16_tensor(rng, H)};
  }

  Json config = model_config(spec);
  if (spec.layout == Layout::modelopt) {
    f.files["hf_quant_config.json"] = modelopt_hf_quant_config(spec).dump(2);
    if (spec.modelopt_config_json) config["quantization_config"] = modelopt_quantization_config(spec);
  } else {
    config["quantization_config"] = compressed_tensors_quantization_config(spec);
  }
  f.files["config.json"] = config.dump(2);
  return f;
}

namespace {

SafetensorsWriter writer_of(const std::map<std::string, StoredTensor>& tensors) {
  SafetensorsWriter w;
  for (const auto& [name, t] : tensors) w.add(name, t.dtype, t.shape, t.bytes);
  w.set_metadata("format", "pt");  // as transformers' save_pretrained writes it
  return w;
}

}  // namespace

std::vector<std::uint8_t> FixtureCheckpoint::serialize() const { return writer_of(tensors).serialize(); }

void FixtureCheckpoint::write(const std::filesystem::path& dir, std::uint64_t max_shard_bytes) const {
  std::filesystem::create_directories(dir);
  for (const auto& [name, text] : files) {
    std::ofstream out(dir / name, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
  }
  const SafetensorsWriter w = writer_of(tensors);
  if (max_shard_bytes == 0) {
    w.write((dir / "model.safetensors").string());
  } else {
    w.write_sharded(dir.string(), max_shard_bytes);
  }
}

void FixtureCheckpoint::set_f32(const std::string& name, float value) {
  StoredTensor& t = tensors.at(name);
  t.dtype = Dtype::f32;
  t.bytes = f32_bytes(value);
}

void FixtureCheckpoint::set_byte(const std::string& name, std::size_t index, std::uint8_t value) {
  tensors.at(name).bytes.at(index) = value;
}

}  // namespace fp4cl::test
