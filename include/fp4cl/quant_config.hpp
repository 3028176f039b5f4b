// A checkpoint's quantization config: which producer wrote it, which FP4 scheme each linear
// module uses (or that it is not quantized), and under which tensor names and global-scale
// direction that producer stores the module's weights. See ../shared/spec/FP4.md §3 and §5.
//
// Three producers are read:
//  - NVIDIA ModelOpt: `hf_quant_config.json` ({"producer": {"name": "modelopt"}, "quantization":
//    {"quant_algo": ...}}) and/or `config.json` → `quantization_config` with `quant_method:
//    "modelopt"`. quant_algo NVFP4 (W4A4), W4A16_NVFP4 (W4A16), or MIXED_PRECISION with a
//    per-module algo in `quantized_layers`. Modules listed in `exclude_modules` (or `ignore` in
//    config.json) are not quantized; entries are fnmatch wildcards ("lm_head", "*mlp.gate",
//    "model.layers.0.self_attn*"), as ModelOpt writes and matches them. A quantized_layers entry
//    may name a parent module ("model.layers.0.mlp.experts" covers every expert projection under
//    it); asked for a parent of listed modules, resolve() answers with their common algo (and
//    throws if they differ). Modules of a MIXED_PRECISION config that are not listed are not
//    quantized.
//  - compressed-tensors (llm-compressor): `config.json` → `quantization_config` with `quant_method:
//    "compressed-tensors"`, `format` nvfp4-pack-quantized or mxfp4-pack-quantized (or
//    mixed-precision with a format per group), `config_groups` whose `targets` select modules and
//    `ignore` listing modules left unquantized. A target or ignore entry is an exact module name,
//    a regular expression after "re:" (matched from the start of the name, like Python's
//    re.match), or the class name "Linear", which matches every module this API is asked about
//    (callers only resolve linear layers). When several groups target a module, the most specific
//    target wins as in compressed-tensors (exact name, then regex, then class name); two groups
//    that match equally specifically with different schemes are an error.
//
//  - gpt-oss (transformers' Mxfp4Config): `config.json` → `quantization_config` with
//    `quant_method: "mxfp4"` and `modules_to_not_convert` (regular expressions matched from the
//    start of the name, as transformers does). Every other module is MXFP4 W4A16; the checkpoint
//    stores its MXFP4 weights as each MoE layer's fused expert tensors, not per module, so
//    tensor_layout() has no per-module layout for it (Checkpoint finds the fused tensors).
//
// KV-cache settings (kv_cache_quant_algo, kv_cache_scheme) concern attention, not linear layers,
// and are not read.
//
// The scheme of a module depends only on the config, never on which tensors the checkpoint
// happens to contain: a W4A16 module stays W4A16 even when calibrated activation scales
// (ModelOpt `input_scale`) are present, and its TensorLayout names no input scale, so the loader
// must not read one (running W4A4 math on a W4A16 checkpoint is a silent correctness bug).
// A loader may rely on this.
//
// Module names are the checkpoint's (safetensors) prefixes of a linear layer, e.g.
// "model.layers.0.self_attn.q_proj" or "model.layers.3.mlp.experts.7.gate_proj".
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fp4cl/scheme.hpp"

namespace fp4cl {

enum class QuantProducer {
  modelopt,            // NVIDIA ModelOpt (TensorRT Model Optimizer)
  compressed_tensors,  // compressed-tensors, as written by llm-compressor
  gpt_oss,             // gpt-oss's MXFP4 checkpoints (transformers' Mxfp4Config)
};
// "ModelOpt" / "compressed-tensors" / "gpt-oss MXFP4".
const char* to_string(QuantProducer producer);

// Which way a stored FP32 global scale points (FP4.md §3).
enum class ScaleDirection {
  none,     // the scheme has no global scale (MXFP4)
  dequant,  // gs_d = amax / (448·6): multiply to dequantize (ModelOpt)
  quant,    // gs_q = 448·6 / amax: divide to dequantize, invert on load (compressed-tensors)
};
const char* to_string(ScaleDirection direction);

// The tensors of one quantized linear module `<p>`, as suffixes: the tensor is "<p>.<suffix>".
// An empty suffix means the scheme has no such tensor; a loader must not read it even if the
// checkpoint contains a tensor of that name.
struct TensorLayout {
  std::string weight;               // packed E2M1 codes, U8 [N, K/2]
  std::string weight_scale;         // block scales, [N, K/16] E4M3 or [N, K/32] E8M0
  std::string weight_global_scale;  // NVFP4 weight's FP32 global scale; empty for MXFP4
  std::string input_global_scale;   // NVFP4 W4A4 activations' FP32 global scale; else empty
  ScaleDirection global_scale_direction = ScaleDirection::none;  // of both global scales

  // "<module>.<suffix>"; `suffix` must not be empty.
  static std::string tensor_name(std::string_view module, std::string_view suffix);
};

// The tensor names and global-scale direction `producer` writes for `scheme`. Throws
// fp4cl::Error for a combination the producer does not write (ModelOpt has no MXFP4 layout;
// gpt-oss quantizes no module on its own, only fused expert tensors).
TensorLayout tensor_layout(QuantProducer producer, const QuantScheme& scheme);

namespace detail {
class QuantRules;
}

class QuantConfig {
 public:
  // Reads `<model_dir>/config.json` (its `quantization_config`) and/or
  // `<model_dir>/hf_quant_config.json`. When config.json carries a ModelOpt quantization_config
  // and hf_quant_config.json exists too, both must name the same quant_algo (config.json is
  // used, as vLLM does). Throws fp4cl::Error when the directory or both files are missing, when
  // neither holds a quantization config, or when the config is malformed or not an FP4 config.
  static QuantConfig load(const std::filesystem::path& model_dir);

  // Reads one JSON file: a config.json with `quantization_config`, an hf_quant_config.json, or
  // a bare quantization_config object (told apart by their content).
  static QuantConfig from_file(const std::filesystem::path& file);

  // The same from JSON text; `source` names it in error messages.
  static QuantConfig from_json(std::string_view json_text, std::string_view source = "<json>");

  QuantProducer producer() const;

  // Where the config came from, e.g. "/m/config.json (quantization_config)".
  const std::string& source() const;

  // The FP4 scheme of linear module `module`, or nullopt when the config leaves it unquantized
  // (ignored / excluded, or matched by no target). Throws fp4cl::Error when the config quantizes
  // the module with a scheme fp4cl cannot run (e.g. FP8 layers of a mixed-precision checkpoint)
  // or assigns it ambiguously.
  std::optional<QuantScheme> resolve(std::string_view module) const;

  // tensor_layout(producer(), scheme).
  TensorLayout layout(const QuantScheme& scheme) const;

  // One line saying what the config decides for `module` and which entry decided it, e.g.
  // "model.layers.0.mlp.gate: not quantized (ignore entry 're:.*mlp.gate$')". Never throws for
  // an unsupported or ambiguous module; it says so instead.
  std::string explain(std::string_view module) const;

 private:
  explicit QuantConfig(std::shared_ptr<const detail::QuantRules> rules);
  std::shared_ptr<const detail::QuantRules> rules_;
};

}  // namespace fp4cl
