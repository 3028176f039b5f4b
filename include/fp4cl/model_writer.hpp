// Writing model directories: a seeded synthetic Qwen3-MoE model in BF16 or F32, and a quantizer
// that turns a BF16/F32 safetensors model into a real NVFP4 / MXFP4 checkpoint in the ModelOpt or
// compressed-tensors layout (../shared/spec/FP4.md §3–§5), which QuantConfig and the checkpoint
// loader read like a producer-written one.
//
// Output is atomic: everything is written into a hidden staging directory beside the target,
// which is renamed into place only when complete; on any error the target is left as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/quant_config.hpp"
#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

// How far a long write has come: `done` of `total` bytes of tensor data in `stage`
// ("generating", "calibrating", "quantizing", "writing").
struct WriteProgress {
  std::string_view stage;
  std::uint64_t done = 0;
  std::uint64_t total = 0;
};
using ProgressCallback = std::function<void(const WriteProgress&)>;

// Where and how a model directory is written.
struct ModelOutputOptions {
  // A model whose tensor data fits is written as one `model.safetensors`; a larger one as shards
  // `model-0000i-of-0000N.safetensors` of at most this many bytes each plus
  // `model.safetensors.index.json`, as transformers' save_pretrained does (its default: 5 GB).
  std::uint64_t max_shard_bytes = 5'000'000'000ull;
  // Replace an existing model directory (one holding config.json); otherwise an output directory
  // that exists and is not empty is an error.
  bool overwrite = false;
  // Called as the work proceeds (may be empty). The library itself never prints.
  ProgressCallback progress;
};

// ---------------------------------------------------------------- synthetic Qwen3-MoE model

// The shape of a synthetic Qwen3-MoE model (transformers' Qwen3MoeForCausalLM: every layer MoE,
// q_norm/k_norm in attention, untied lm_head). Defaults are small enough for tests.
struct SyntheticModelOptions {
  std::uint64_t seed = 0;
  std::int64_t layers = 2;             // num_hidden_layers
  std::int64_t hidden = 256;           // hidden_size H
  std::int64_t intermediate = 128;     // moe_intermediate_size I (per expert)
  std::int64_t experts = 8;            // num_experts E
  std::int64_t experts_per_token = 2;  // num_experts_per_tok k
  std::int64_t heads = 4;              // num_attention_heads
  std::int64_t kv_heads = 2;           // num_key_value_heads (divides heads)
  std::int64_t head_dim = 64;
  std::int64_t vocab = 512;   // vocab_size
  Dtype dtype = Dtype::bf16;  // Dtype::bf16 or Dtype::f32
};

struct SyntheticTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Every tensor of the model, in model order: model.embed_tokens.weight [V, H]; per layer L
// model.layers.L.{input_layernorm, post_attention_layernorm}.weight [H],
// self_attn.{q,k,v}_proj.weight [heads·head_dim | kv_heads·head_dim, H], self_attn.o_proj.weight
// [H, heads·head_dim], self_attn.{q,k}_norm.weight [head_dim], mlp.gate.weight [E, H] (the
// router), mlp.experts.e.{gate,up}_proj.weight [I, H], mlp.experts.e.down_proj.weight [H, I];
// then model.norm.weight [H] and lm_head.weight [V, H]. Throws fp4cl::Error naming an option
// that is not positive, experts_per_token > experts, heads not a multiple of kv_heads, or a dtype
// other than BF16/F32.
std::vector<SyntheticTensor> synthetic_model_tensors(const SyntheticModelOptions& options);

// The values of one tensor, before rounding to the model's dtype (double → float, then RNE to
// BF16 for a BF16 model). Tensor T draws from PortableRandom(seed XOR fnv1a64(T)) (see
// host/checkpoint/portable_random.hpp: SplitMix64-seeded xoshiro256**, polar-method normals z):
//  - norms (1-D): 1 + 0.1·z;
//  - embed_tokens, lm_head, mlp.gate [N, K]: σ·z with σ = 1/√K;
//  - *_proj [N, K]: row by row, a = uniform(), b = uniform(), row scale (1 + a)·2^-⌊4b⌋ (spread
//    over [1/8, 2)), then K values σ·row_scale·z; then max(1, N·K/1024) outliers: index =
//    next() mod N·K, value × (8 + 24·uniform()).
// The same options and tensor give the same values on every platform.
std::vector<double> synthetic_tensor_values(const SyntheticModelOptions& options,
                                            const SyntheticTensor& tensor);

// The model's config.json text (keys sorted, two-space indent, as save_pretrained writes it).
std::string synthetic_model_config(const SyntheticModelOptions& options);

// Writes config.json and the weights into `directory`. Same options → identical bytes.
void write_synthetic_model(const std::filesystem::path& directory, const SyntheticModelOptions& options,
                           const ModelOutputOptions& output = {});

// ---------------------------------------------------------------- FP4 quantization

struct QuantizeOptions {
  QuantScheme scheme;
  QuantProducer layout = QuantProducer::compressed_tensors;
  // Modules (a 2-D "<module>.weight" tensor) to quantize, as fnmatch patterns over the module
  // name; a module matching an `exclude` pattern is not quantized. The default quantizes every
  // *_proj linear (attention projections and every expert's gate/up/down) and keeps the routers
  // (mlp.gate), lm_head, embeddings and norms as they are.
  std::vector<std::string> include = {"*_proj"};
  std::vector<std::string> exclude;
  // NVFP4 W4A4 activation global scales (ModelOpt input_scale = amax/(448·6), compressed-tensors
  // input_global_scale = 448·6/amax). There is no calibration data, so amax is either this fixed
  // value for every module, or (when absent) measured on synthetic activations: `calibration_rows`
  // rows of N(0,1) values (BF16; the stand-in for RMS-normalized hidden states) feed every module,
  // except that a down_proj sees bf16(silu(x·gateᵀ) ⊙ (x·upᵀ)) of its sibling gate_proj/up_proj
  // and an o_proj sees x·v_projᵀ (attention mixes value rows) when those siblings exist.
  std::optional<float> input_amax;
  std::int64_t calibration_rows = 16;
  std::uint64_t calibration_seed = 0;
};

struct QuantizeSummary {
  std::vector<std::string> quantized;  // modules written in FP4
  std::vector<std::string> ignored;    // linear modules kept as they were (the config's ignore list)
  std::size_t copied_tensors = 0;      // tensors copied unchanged
  std::vector<std::string> files;      // what the output directory holds
};

// Quantizes the safetensors model in `input` (a directory with config.json) into `output`:
// quantized modules get exactly the tensors tensor_layout(layout, scheme) names, everything
// else is copied bit for bit; config.json gains the producer's quantization_config (ModelOpt
// also gets hf_quant_config.json); other files (tokenizer, generation config, ...) at the top of
// `input` are copied. Throws fp4cl::Error (leaving `output` untouched) for ModelOpt with MXFP4,
// an input that is already quantized, a module whose in_features is not a multiple of the block
// size, a weight that is not BF16/F32 or holds Inf/NaN, or an output that exists and is not
// empty (unless `output_options.overwrite`).
QuantizeSummary quantize_model(const std::filesystem::path& input, const std::filesystem::path& output,
                               const QuantizeOptions& options, const ModelOutputOptions& output_options = {});

// The compressed-tensors preset names: "nvfp4" (NVFP4 W4A4), "nvfp4a16", "mxfp4", "mxfp4a16"
// (any case). Throws fp4cl::Error listing them for another name.
QuantScheme quant_scheme_from_name(std::string_view name);
// "modelopt" or "compressed-tensors". Throws fp4cl::Error for another name.
QuantProducer quant_producer_from_name(std::string_view name);

}  // namespace fp4cl
