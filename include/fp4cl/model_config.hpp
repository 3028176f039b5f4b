// What a model's config.json (transformers' keys) says about running its MoE layers: how many
// experts a token is routed to and how the routing weights are formed. Checkpoints written by
// `fp4cl quantize` and by ModelOpt / llm-compressor keep the model's config.json, so these facts
// travel with the quantized weights.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "fp4cl/moe_activation.hpp"
#include "fp4cl/moe_logit_routing.hpp"

namespace fp4cl {

struct ModelConfig {
  std::string source;      // the config.json read, or "" when the directory has none
  std::string model_type;  // "qwen3_moe", "mixtral", ... ("" when absent)
  // Each value is read at the top level, else under "text_config" (multimodal configs).
  std::optional<int> experts_per_token;     // num_experts_per_tok: the MoE top-k
  std::optional<bool> norm_topk_prob;       // renormalize the top-k routing weights
  std::optional<std::string> scoring_func;  // DeepSeek: "softmax" or "sigmoid"
  std::optional<std::string> topk_method;   // DeepSeek: "greedy", "group_limited_greedy" or "noaux_tc"
  std::optional<int> n_group;               // DeepSeek: expert groups (>= 1)
  std::optional<int> topk_group;            // DeepSeek: groups a token's experts come from (>= 1)
  std::optional<double> routed_scaling_factor;  // DeepSeek, GLM-4.5: × the routing weights (> 0)
  std::optional<double> swiglu_limit;       // gpt-oss: the clamped SwiGLU's limit (7.0)

  // Reads `<model_dir>/config.json`; a directory without one gives an empty ModelConfig. Throws
  // fp4cl::Error naming the file and key for malformed JSON or a value of the wrong type (or
  // num_experts_per_tok < 1).
  static ModelConfig load(const std::filesystem::path& model_dir);

  // Whether the router renormalizes its top-k weights: norm_topk_prob when stated, else the
  // transformers default of the model type (Mixtral and gpt-oss: always; DeepSeek-V3, Kimi-K2 and
  // GLM-4.5: true; Qwen2-MoE, Qwen3-MoE and DeepSeek-V2: false), else nothing.
  std::optional<bool> renormalize() const;

  // Whether the model routes by plain softmax top-k (Mixtral, Qwen3-MoE, gpt-oss): false for
  // DeepSeek's and GLM-4.5's gates, which logit_routing() describes.
  bool softmax_routing() const { return logit_routing().plain_softmax(); }
  // How the model's router turns logits into top-k ids and weights (MoeConfig::logit_routing;
  // MoeConfig::from_checkpoint adds the correction bias from the checkpoint where
  // router_correction_bias()):
  //   scoring   scoring_func; model_type "glm4_moe" (which does not state it): sigmoid
  //   groups    n_group and topk_group (default: n_group) for topk_method "group_limited_greedy"
  //             and "noaux_tc" (glm4_moe's); none for "greedy" or no topk_method
  //   scaling   routed_scaling_factor (default 1)
  // A scoring_func or topk_method fp4cl does not compute gives a routing whose `unsupported` says
  // which.
  MoeLogitRouting logit_routing() const;
  // Whether the gate adds an e_score_correction_bias to the scores it chooses by (topk_method
  // "noaux_tc", and glm4_moe).
  bool router_correction_bias() const;
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
