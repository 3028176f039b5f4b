// A quantized model directory as a serving runtime hands it over: its safetensors tensors and
// quantization config, which linear modules and MoE layers are FP4-quantized with which scheme,
// and loading them into prepared host weights (fp4cl/weights.hpp). See ../shared/spec/FP4.md
// §2–§6.
//
// Checkpoint::open() reads the config, maps every shard, and discovers the quantized layers from
// the tensor names the producer writes (FP4.md §5): a module `<p>` is quantized when the
// checkpoint holds `<p>.weight_packed` (compressed-tensors), or `<p>.weight` as U8 or with a
// `<p>.weight_scale` / `<p>.weight_scale_2` beside it (ModelOpt, whose unquantized modules use
// the same `.weight` suffix). Expert projections are grouped into MoE layers by the naming
// conventions of the models (one table, checkpoint/expert_naming.cpp):
//   Qwen3-MoE / DeepSeek  <layer>.mlp.experts.{e}.{gate_proj, up_proj, down_proj}
//   Mixtral               <layer>.block_sparse_moe.experts.{e}.{w1 (gate), w3 (up), w2 (down)}
// gpt-oss checkpoints (quant_method "mxfp4") store each MoE layer's experts as fused tensors,
// `<layer>.mlp.experts.gate_up_proj_blocks` and the rest (host/checkpoint/fused_experts.hpp):
// one MoE layer per such tensor, named "<layer>.mlp.experts", expert_naming "gpt-oss (fused
// experts)".
// open() checks what can be checked from the headers alone — every tensor a layer needs is
// present, with the dtype and shape its scheme requires; every MoE layer has experts 0..E-1
// (E also checked against config.json's num_experts / num_local_experts / n_routed_experts when
// present), each with gate, up and down of one scheme and consistent sizes — and throws an
// fp4cl::Error naming the tensor, the file and what was expected otherwise. Loading checks the
// values: NaN or negative block scales and zero, negative or non-finite global scales are
// rejected; zero block scales and negative-zero codes are accepted (they occur in real
// checkpoints).
//
// The scheme of a module comes from the config only (QuantConfig::resolve). A W4A16 module stays
// W4A16 whatever activation scales the checkpoint carries: they are never read.
//
// A Checkpoint is immutable after open() and may be used from several threads at once; copies
// share the same mappings. Loaded weights are plain host vectors, independent of the Checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/quant_config.hpp"
#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

enum class LayerKind {
  linear,  // one quantized linear module
  moe,     // the routed experts of one MoE layer
};
// "linear" / "moe".
const char* to_string(LayerKind kind);

// One quantized layer of a checkpoint.
struct CheckpointLayer {
  // linear: the module, "model.layers.0.self_attn.q_proj"; MoE: the experts' container,
  // "model.layers.0.mlp.experts" (its experts are "<name>.{e}.<projection>").
  std::string name;
  LayerKind kind = LayerKind::linear;
  QuantScheme scheme;
  // linear: the weight [out_features, in_features].
  std::int64_t out_features = 0;
  std::int64_t in_features = 0;
  // MoE: E experts, hidden size H (FC1's in-features), intermediate size I (per expert).
  std::int64_t num_experts = 0;
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  std::string expert_naming;  // MoE: the naming convention, "Qwen3-MoE / DeepSeek" or "Mixtral"
  // The bytes a load reads: packed codes, block scales, and the global scales the scheme uses.
  std::uint64_t stored_bytes = 0;
};

// A module the checkpoint quantizes with something fp4cl cannot run (e.g. the FP8 layers of a
// mixed-precision checkpoint): listed, never loaded.
struct UnsupportedModule {
  std::string module;
  std::string reason;
};

struct LoadedLinear {
  Fp4Weight weight;
  QuantScheme scheme;
  // The module's bias ("<module>.bias", BF16 or F32 [out_features], as fp32) where the checkpoint
  // has one, else empty: pass it as LinearOptions::bias (Linear::from_checkpoint does).
  std::vector<float> bias;
};

struct LoadedExperts {
  Fp4Experts experts;
  QuantScheme scheme;
  // The last shared_experts of `experts` are the layer's shared expert, cut into that many
  // experts of the routed experts' intermediate size (MoeLoadOptions::shared_experts);
  // MoeConfig::shared_experts takes this count.
  int shared_experts = 0;
};

// Which activation global scale each expert of a W4A4 NVFP4 MoE layer gets. FC1's input is the
// same for gate and up, so an expert's FC1 scale is always the wider of its gate's and up's
// (larger dequant-direction scale = larger calibrated amax: nothing clips), as in vLLM
// (quantization/modelopt.py ModelOptNvFp4FusedMoE and compressed_tensors_moe.py
// CompressedTensorsW4A4Nvfp4MoEMethod, process_weights_after_loading: max(dim=1) of ModelOpt's
// input_scale, min(dim=1) of compressed-tensors' input_global_scale).
enum class ExpertInputScales {
  // Each expert its own FC1 and FC2 scale: vLLM's default (CUTLASS, non-FlashInfer) path.
  per_expert,
  // One scale for all experts, the widest of them (ModelOpt input_scale.max(), compressed-tensors
  // input_global_scale.min()), repeated E times: vLLM's FlashInfer CUTLASS/TRT-LLM path.
  shared,
};

struct MoeLoadOptions {
  ExpertInputScales input_scales = ExpertInputScales::per_expert;
  // true: stack the layer's shared expert, the gated MLP "<p>.shared_experts" beside its experts
  // "<p>.experts" (DeepSeek-V2/V3, Kimi-K2, GLM-4.5), after its routed experts, to be fused into
  // the layer (MoeConfig::shared_experts; MoeLayer::from_checkpoint sets it). It must have the
  // routed experts' scheme and hidden size, and an intermediate size P times theirs (config.json's
  // n_shared_experts P: DeepSeek-V2's 2, the others' 1); it is stacked as P experts of theirs,
  // each part of its intermediate rows (the parts' outputs sum to its own). It keeps its own
  // activation scales under ExpertInputScales::shared (the routed experts share the widest of
  // theirs). A layer without one is an error naming the module.
  bool shared_experts = false;
};

namespace detail {
struct CheckpointIndex;
}
struct CheckpointReport;
class Checkpoint;
CheckpointReport inspect_checkpoint(const Checkpoint& checkpoint);  // fp4cl/checkpoint_report.hpp

class Checkpoint {
 public:
  // Opens the model directory `dir`: config.json / hf_quant_config.json (QuantConfig::load) and
  // model.safetensors.index.json or model.safetensors (SafetensorsModel::open).
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& directory() const;
  const QuantConfig& config() const;
  const SafetensorsModel& tensors() const;

  // The quantized layers in model order (names compared with their numbers as numbers, so
  // "layers.2" comes before "layers.10"): linear modules, and one entry per MoE layer (its
  // expert projections are not listed as linears).
  const std::vector<CheckpointLayer>& layers() const;
  // The MoE layers among them, in the same order.
  std::vector<CheckpointLayer> moe_layers() const;
  // The layer named `name` (a linear module or an MoE layer name); throws when there is none.
  const CheckpointLayer& layer(std::string_view name) const;
  // The MoE layer named `layer` ("model.layers.3.mlp.experts") or whose decoder layer's prefix is
  // `layer` ("model.layers.3"), as load_moe() resolves it; throws when there is none.
  const CheckpointLayer& moe_layer(std::string_view layer) const;
  // Every quantized linear module, expert projections stored one module each included, in model
  // order. Experts stored fused (gpt-oss's <layer>.gate_up_proj_blocks and down_proj_blocks) are
  // no modules: their layers are among moe_layers(), which load_moe() loads.
  std::vector<std::string> quantized_modules() const;
  const std::vector<UnsupportedModule>& unsupported_modules() const;

  // The prepared weight of quantized linear module `module` (an expert projection too): codes
  // and block scales as stored, global scales in both directions as the kernels want them
  // (Fp4Weight documents which is exact). Throws fp4cl::Error when the module is not a
  // quantized linear module of this checkpoint, or when its values are invalid.
  LoadedLinear load_linear(std::string_view module) const;

  // The stacked experts of an MoE layer: `layer` is its name ("model.layers.3.mlp.experts") or
  // its decoder layer's prefix ("model.layers.3"); `index` counts the MoE layers of
  // moe_layers() from 0.
  LoadedExperts load_moe(std::string_view layer, const MoeLoadOptions& options = {}) const;
  LoadedExperts load_moe(std::size_t index, const MoeLoadOptions& options = {}) const;
  // A gated MLP y = down(bf16(silu(x·gateᵀ) × x·upᵀ)) whose quantized projections are
  // "<prefix>.gate_proj", "<prefix>.up_proj" and "<prefix>.down_proj", as one expert (E = 1,
  // checked as load_moe() checks each expert): an MoE layer's shared expert
  // ("model.layers.3.mlp.shared_experts": DeepSeek-V3, Kimi-K2, GLM-4.5) or a dense layer's MLP
  // ("model.layers.0.mlp"). Run it as an MoE layer of one expert with top_k 1 and every weight 1
  // (README, "Routing"). Throws fp4cl::Error naming the projection that is missing or unquantized.
  LoadedExperts load_mlp(std::string_view prefix, const MoeLoadOptions& options = {}) const;

 private:
  friend CheckpointReport inspect_checkpoint(const Checkpoint& checkpoint);
  explicit Checkpoint(std::shared_ptr<const detail::CheckpointIndex> index) : index_(std::move(index)) {}
  std::shared_ptr<const detail::CheckpointIndex> index_;
};

}  // namespace fp4cl
