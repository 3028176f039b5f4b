// Test fixtures: small but real FP4 checkpoints, written as the producers write them (FP4.md
// §5) — ModelOpt (NVFP4, W4A16_NVFP4) and compressed-tensors (nvfp4-pack-quantized with and
// without activations, mxfp4-pack-quantized with and without) — with dense linears, MoE experts
// in the Qwen3-MoE and Mixtral naming, unquantized tensors beside them (embeddings, norms,
// routers, lm_head), and hand-written config JSON in each producer's shape. The weights are
// deterministic pseudo-random BF16 values quantized with the formats.hpp reference quantizers;
// what was quantized is kept so tests can compare a load bit for bit.
//
// A fixture is built in memory (tensors and config files) so that a test can break it — drop a
// tensor, change a dtype, poison a scale — before writing it to a directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/formats.hpp"
#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl::test {

enum class Layout { modelopt, compressed_tensors };
const char* to_string(Layout layout);

enum class ExpertStyle {
  qwen3,    // <layer>.mlp.experts.{e}.{gate_proj, up_proj, down_proj}, router <layer>.mlp.gate
  mixtral,  // <layer>.block_sparse_moe.experts.{e}.{w1, w3, w2}, router <layer>.block_sparse_moe.gate
};

struct LinearSpec {
  std::string module;  // "model.layers.0.self_attn.q_proj"
  std::int64_t out_features = 0;
  std::int64_t in_features = 0;
};

struct MoeSpec {
  std::string prefix;  // the decoder layer, "model.layers.0"
  std::int64_t experts = 0;
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
};

// How the fixture picks the quant-direction global scales gs_q it quantizes with (NVFP4).
enum class ScaleChoice {
  calibrated,    // gs_q = 448·6 / amax, as the producers compute it (generally not a power of two)
  power_of_two,  // that, rounded down to a power of two: exact in both directions
};

struct ModelSpec {
  Layout layout = Layout::modelopt;
  QuantScheme scheme;
  ExpertStyle expert_style = ExpertStyle::qwen3;
  std::int64_t hidden = 64;  // for the unquantized tensors (embeddings, norms, routers)
  std::vector<LinearSpec> linears;
  std::vector<MoeSpec> moes;
  ScaleChoice scales = ScaleChoice::calibrated;
  // Write calibrated activation scales (ModelOpt input_scale, compressed-tensors
  // input_global_scale) even though the scheme is W4A16, as mixed exports do.
  bool activation_scales_in_w4a16 = false;
  // ModelOpt: also write quantization_config into config.json (recent exports do), not only
  // hf_quant_config.json.
  bool modelopt_config_json = true;
  std::uint64_t seed = 1;
};

// A Qwen3-MoE-like model: per layer q/k/v/o projections and E experts (qwen3 or mixtral style).
ModelSpec moe_model(Layout layout, const QuantScheme& scheme, int layers, std::int64_t experts,
                    std::int64_t hidden = 64, std::int64_t intermediate = 32, ExpertStyle style = ExpertStyle::qwen3);
// A Llama-like dense model: per layer q/k/v/o and gate/up/down projections.
ModelSpec dense_model(Layout layout, const QuantScheme& scheme, int layers, std::int64_t hidden = 64,
                      std::int64_t intermediate = 96);

// The expert projection module names of a style: gate, up, down.
std::string expert_module(ExpertStyle style, const std::string& prefix, std::int64_t expert, int projection);
std::string moe_layer_name(ExpertStyle style, const std::string& prefix);

struct StoredTensor {
  Dtype dtype = Dtype::u8;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// What the fixture quantized for one module.
struct ExpectedModule {
  QuantizedRows weight;       // codes, block scales, global_scale = gs_d = 1/gs_q (1 for MXFP4)
  float weight_gs_quant = 1;  // the gs_q the weight was quantized with (NVFP4)
  float input_gs_quant = 1;   // the activations' calibrated gs_q (NVFP4; written for W4A4)
};

class FixtureCheckpoint {
 public:
  static FixtureCheckpoint build(const ModelSpec& spec);

  const ModelSpec& spec() const { return spec_; }
  // The tensor names of module `module` under the spec's layout.
  std::string weight_name(const std::string& module) const;
  std::string scale_name(const std::string& module) const;
  std::string global_scale_name(const std::string& module) const;  // NVFP4 only
  std::string input_scale_name(const std::string& module) const;   // NVFP4 only

  const ExpectedModule& expected(const std::string& module) const;

  // Every tensor, by name; tests edit these before write().
  std::map<std::string, StoredTensor> tensors;
  // File name → content (config.json, hf_quant_config.json).
  std::map<std::string, std::string> files;
  std::map<std::string, ExpectedModule> modules;

  // Writes the files and the tensors: one model.safetensors, or shards of at most
  // `max_shard_bytes` with an index when it is not 0.
  void write(const std::filesystem::path& dir, std::uint64_t max_shard_bytes = 0) const;
  // The single-file safetensors bytes.
  std::vector<std::uint8_t> serialize() const;

  // Edits for the bad-input tests.
  void set_f32(const std::string& name, float value);  // keeps the tensor's shape
  void set_byte(const std::string& name, std::size_t index, std::uint8_t value);

 private:
  ModelSpec spec_;
};

}  // namespace fp4cl::test
