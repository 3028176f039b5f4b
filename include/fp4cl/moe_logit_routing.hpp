// How the MoE layer turns router logits into top-k expert ids and weights (MoeConfig::logit_routing,
// MoeLayer::enqueue_logits), in a header of its own so that the scalar reference (host/reference,
// no OpenCL) can take it too.
//
// The default is softmax top-k (Mixtral, Qwen3-MoE, gpt-oss). Anything else runs vLLM's
// grouped_topk, which is also DeepSeek-V3's "noaux_tc" gate (HF modeling_deepseek MoEGate):
//   s_e = softmax(l)_e or sigmoid(l_e) = 1 / (1 + e^-l_e)               the scores
//   c_e = s_e + correction_bias_e (or s_e without a bias)               the keys experts are chosen by
//   group g (experts g·E/G .. (g+1)·E/G - 1) scores the sum of its two largest keys with a bias,
//     else its largest key; the top_groups best groups are kept, the other groups' experts dropped
//   slot s = the kept expert of rank s by key (ties to the lower index; NaN ranks below every number)
//   w_s = s_{e_s} (the score, without the bias); with MoeConfig::renormalize w_s / (Σ_j w_j + 1e-20)
//     (slot order; HF's DeepSeek-V3 MoEGate adds the 1e-20, so that scores that all underflow to 0
//     give weights 0, not NaN); then × scaling_factor
// in fp32 on the device.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp4cl {

class Checkpoint;  // fp4cl/checkpoint.hpp

struct MoeLogitRouting {
  enum class Scoring {
    softmax,  // softmax over the token's E_global logits
    sigmoid,  // sigmoid of each logit (DeepSeek-V3, Kimi-K2, GLM-4.5)
  };
  Scoring scoring = Scoring::softmax;
  int groups = 1;      // config.json's n_group: divides E_global, at most 64
  int top_groups = 1;  // topk_group: 1 .. groups; top_k must be at most top_groups × E_global / groups
  // e_score_correction_bias: empty, or E_global finite values (the checkpoint's gate tensor).
  std::vector<float> correction_bias;
  float scaling_factor = 1.0f;  // routed_scaling_factor: finite and > 0
  // Non-empty: the model's router is one fp4cl does not compute, and why (MoeConfig::
  // from_checkpoint sets it, e.g. for a scoring function other than softmax and sigmoid).
  // enqueue_logits then throws fp4cl::Error with it; precomputed top-k ids still run.
  std::string unsupported;

  // Softmax top-k with nothing else: the layer ranks by logit (the same order as by score, but for
  // scores that round equal) and runs its plain softmax router.
  bool plain_softmax() const {
    return scoring == Scoring::softmax && groups == 1 && correction_bias.empty() && scaling_factor == 1.0f &&
           unsupported.empty();
  }

  // The routing of MoE layer `layer` of a checkpoint (its name or its decoder layer's prefix):
  // ModelConfig::logit_routing() of its config.json, with the gate's correction bias
  // ("<p>.gate.e_score_correction_bias" beside the experts "<p>.experts", F32 or BF16 [E]) where
  // ModelConfig::router_correction_bias(). A checkpoint without that tensor gives a routing
  // whose `unsupported` names it; one of another shape or dtype, or with a value that is not
  // finite, is an fp4cl::Error naming the tensor.
  static MoeLogitRouting from_checkpoint(const Checkpoint& checkpoint, std::string_view layer);

  // DeepSeek-V3 / R1: sigmoid, 8 groups of which 4 are kept, the layer's correction bias, × 2.5 (with
  // MoeConfig::renormalize = true: config.json's norm_topk_prob).
  static MoeLogitRouting deepseek_v3(std::vector<float> correction_bias) {
    MoeLogitRouting r;
    r.scoring = Scoring::sigmoid;
    r.groups = 8;
    r.top_groups = 4;
    r.correction_bias = std::move(correction_bias);
    r.scaling_factor = 2.5f;
    return r;
  }
};

}  // namespace fp4cl
