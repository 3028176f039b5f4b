// The synthetic Qwen3-MoE model: tensor list, seeded values, config.json, and writing it.
// Tensor names and config fields follow transformers' Qwen3MoeForCausalLM checkpoints
// (e.g. Qwen/Qwen3-30B-A3B); the values follow the recipe in fp4cl/model_writer.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/portable_random.hpp"
#include "checkpoint/staged_model_directory.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/model_writer.hpp"
#include "support/check.hpp"
#include "support/text.hpp"

namespace fp4cl {

namespace {

void check_options(const SyntheticModelOptions& o) {
  const std::pair<const char*, std::int64_t> positive[] = {
      {"layers", o.layers},
      {"hidden", o.hidden},
      {"intermediate", o.intermediate},
      {"experts", o.experts},
      {"experts_per_token", o.experts_per_token},
      {"heads", o.heads},
      {"kv_heads", o.kv_heads},
      {"head_dim", o.head_dim},
      {"vocab", o.vocab},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) fail("synthetic model: {} = {} must be positive", name, value);
  }
  if (o.experts_per_token > o.experts) {
    fail("synthetic model: experts_per_token = {} exceeds experts = {}", o.experts_per_token, o.experts);
  }
  if (o.heads % o.kv_heads != 0) {
    fail("synthetic model: heads = {} is not a multiple of kv_heads = {} (grouped-query attention)", o.heads,
         o.kv_heads);
  }
  if (o.dtype != Dtype::bf16 && o.dtype != Dtype::f32) {
    fail("synthetic model: dtype {} is not supported (BF16 or F32)", dtype_name(o.dtype));
  }
}

enum class ValueKind { norm, dense, linear };

ValueKind kind_of(const SyntheticTensor& t) {
  if (t.shape.size() == 1) return ValueKind::norm;
  if (ends_with(t.name, "_proj.weight")) return ValueKind::linear;
  return ValueKind::dense;
}

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

}  // namespace

std::vector<SyntheticTensor> synthetic_model_tensors(const SyntheticModelOptions& o) {
  check_options(o);
  const std::int64_t H = o.hidden, I = o.intermediate, q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim;
  std::vector<SyntheticTensor> t;
  t.push_back({"model.embed_tokens.weight", {o.vocab, H}});
  for (std::int64_t layer = 0; layer < o.layers; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    t.push_back({p + "input_layernorm.weight", {H}});
    t.push_back({p + "self_attn.q_proj.weight", {q, H}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, H}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, H}});
    t.push_back({p + "self_attn.o_proj.weight", {H, q}});
    t.push_back({p + "self_attn.q_norm.weight", {o.head_dim}});
    t.push_back({p + "self_attn.k_norm.weight", {o.head_dim}});
    t.push_back({p + "post_attention_layernorm.weight", {H}});
    t.push_back({p + "mlp.gate.weight", {o.experts, H}});
    for (std::int64_t e = 0; e < o.experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      t.push_back({x + "gate_proj.weight", {I, H}});
      t.push_back({x + "up_proj.weight", {I, H}});
      t.push_back({x + "down_proj.weight", {H, I}});
    }
  }
  t.push_back({"model.norm.weight", {H}});
  t.push_back({"lm_head.weight", {o.vocab, H}});
  return t;
}

std::vector<double> synthetic_tensor_values(const SyntheticModelOptions& o, const SyntheticTensor& tensor) {
  check_options(o);
  if (tensor.shape.empty() || tensor.shape.size() > 2) {
    fail("synthetic model: tensor '{}' has shape {}; expected 1 or 2 dimensions", tensor.name,
         shape_string(tensor.shape));
  }
  detail::PortableRandom random(o.seed, tensor.name);
  const std::uint64_t count = element_count(tensor.shape);
  std::vector<double> v(static_cast<std::size_t>(count));
  const ValueKind kind = kind_of(tensor);
  if (kind == ValueKind::norm) {
    for (double& x : v) {
      const double z = random.normal();
      const double d = 0.1 * z;
      x = 1.0 + d;
    }
    return v;
  }
  const std::int64_t rows = tensor.shape[0], cols = tensor.shape[1];
  const double sigma = 1.0 / std::sqrt(static_cast<double>(cols));
  if (kind == ValueKind::dense) {
    for (double& x : v) x = sigma * random.normal();
    return v;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const double a = random.uniform();
    const double b = random.uniform();
    const double row_scale = std::ldexp(1.0 + a, -static_cast<int>(4.0 * b));  // exact
    const double row_sigma = sigma * row_scale;
    double* row = &v[static_cast<std::size_t>(r * cols)];
    for (std::int64_t c = 0; c < cols; ++c) row[c] = row_sigma * random.normal();
  }
  const std::uint64_t outliers = std::max<std::uint64_t>(1, count / 1024);
  for (std::uint64_t i = 0; i < outliers; ++i) {
    const std::uint64_t index = random.next() % count;
    const double factor = 8.0 + 24.0 * random.uniform();
    v[static_cast<std::size_t>(index)] *= factor;
  }
  return v;
}

std::string synthetic_model_config(const SyntheticModelOptions& o) {
  check_options(o);
  // nlohmann::json keeps object keys sorted, as transformers writes config.json (sort_keys=True).
  nlohmann::json c;
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 151643;
  c["decoder_sparse_step"] = 1;
  c["eos_token_id"] = 151645;
  c["head_dim"] = o.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = o.hidden;
  c["initializer_range"] = 0.02;
  // The dense-MLP width; unused, as every layer is MoE (decoder_sparse_step 1, no mlp_only_layers).
  c["intermediate_size"] = o.intermediate * o.experts_per_token;
  c["max_position_embeddings"] = 4096;
  c["max_window_layers"] = o.layers;
  c["mlp_only_layers"] = nlohmann::json::array();
  c["model_type"] = "qwen3_moe";
  c["moe_intermediate_size"] = o.intermediate;
  c["norm_topk_prob"] = true;
  c["num_attention_heads"] = o.heads;
  c["num_experts"] = o.experts;
  c["num_experts_per_tok"] = o.experts_per_token;
  c["num_hidden_layers"] = o.layers;
  c["num_key_value_heads"] = o.kv_heads;
  c["output_router_logits"] = false;
  c["rms_norm_eps"] = 1e-06;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 1000000.0;
  c["router_aux_loss_coef"] = 0.001;
  c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = o.dtype == Dtype::bf16 ? "bfloat16" : "float32";
  c["use_cache"] = true;
  c["use_sliding_window"] = false;
  c["vocab_size"] = o.vocab;
  return c.dump(2) + "\n";
}

void write_synthetic_model(const std::filesystem::path& directory, const SyntheticModelOptions& o,
                           const ModelOutputOptions& output) {
  const std::vector<SyntheticTensor> tensors = synthetic_model_tensors(o);
  const std::uint64_t element_bytes = o.dtype == Dtype::bf16 ? 2 : 4;
  std::uint64_t total = 0;
  for (const SyntheticTensor& t : tensors) total += element_count(t.shape) * element_bytes;

  detail::StagedModelDirectory out(directory, output.overwrite);
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");  // transformers refuses safetensors files without it
  std::uint64_t done = 0;
  for (const SyntheticTensor& t : tensors) {
    const std::vector<double> values = synthetic_tensor_values(o, t);
    if (o.dtype == Dtype::bf16) {
      std::vector<std::uint16_t> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(static_cast<float>(values[i]));
      writer.add(t.name, Dtype::bf16, t.shape, bits.data(), bits.size() * 2);
    } else {
      std::vector<float> floats(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) floats[i] = static_cast<float>(values[i]);
      writer.add(t.name, t.shape, floats);
    }
    done += element_count(t.shape) * element_bytes;
    if (output.progress) output.progress({"generating", done, total});
  }
  out.write_text("config.json", synthetic_model_config(o));
  if (output.progress) output.progress({"writing", 0, total});
  out.write_tensors(writer, total, output.max_shard_bytes);
  out.commit();
  if (output.progress) output.progress({"writing", total, total});
}

}  // namespace fp4cl
