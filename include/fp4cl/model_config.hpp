// What a model's config.json (transformers' keys) says about running its MoE layers: how many
// experts a token is routed to and how the routing weights are formed. Checkpoints written by
// `fp4cl quantize` and by ModelOpt / llm-compressor keep the model's config.json, so these facts
// travel with the quantized weights.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "fp4cl/moe_activation.hpp"

namespace fp4cl {

struct ModelConfig {
  std::string source;      // the config.json read, or "" when the directory has none
  std::string model_type;  // "qwen3_moe", "mixtral", ... ("" when absent)
  // Each value is read at the top level, else under "text_config" (multimodal configs).
  std::optional<int> experts_per_token;     // num_experts_per_tok: the MoE top-k
  std::optional<bool> norm_topk_prob;       // renormalize the top-k routing weights
  std::optional<std::string> scoring_func;  // DeepSeek: "softmax" or "sigmoid"
  std::optional<double> swiglu_limit;       // gpt-oss: the clamped SwiGLU's limit (7.0)

  // Reads `<model_dir>/config.json`; a directory without one gives an empty ModelConfig. Throws
  // fp4cl::Error naming the file and key for malformed JSON or a value of the wrong type (or
  // num_experts_per_tok < 1).
  static ModelConfig load(const std::filesystem::path& model_dir);

  // Whether the router renormalizes its top-k weights: norm_topk_prob when stated, else the
  // transformers default of the model type (Mixtral and gpt-oss: always; Qwen2-MoE and Qwen3-MoE:
  // false), else nothing.
  std::optional<bool> renormalize() const;

  // Whether the layer's device router (softmax over the logits, then top-k) computes this model's
  // routing: false for a scoring function other than softmax (DeepSeek V3's sigmoid with grouped
  // top-k), whose callers must pass precomputed topk_ids and topk_weights.
  bool softmax_routing() const { return !scoring_func || *scoring_func == "softmax"; }
  // Whether the experts' activation is gpt-oss's clamped SwiGLU: model_type "gpt_oss" or a
  // swiglu_limit.
  bool clamped_swiglu() const { return model_type == "gpt_oss" || swiglu_limit.has_value(); }
  // The experts' activation (what MoeConfig::from_checkpoint and the C API take): where
  // clamped_swiglu(), MoeActivation::gpt_oss() with swiglu_limit as its limit when stated; else
  // SwiGLU.
  MoeActivation activation() const {
    MoeActivation a;
    if (!clamped_swiglu()) return a;
    a = MoeActivation::gpt_oss();
    if (swiglu_limit) a.limit = static_cast<float>(*swiglu_limit);
    return a;
  }
};

}  // namespace fp4cl
