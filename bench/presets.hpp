// Model shapes for benchmarks: the routed-expert MoE layers of ../shared/spec/MODELS.md, as one
// table of data. A linear benchmark of a preset times the expert's two projections (FC1: the
// fused gate/up rows, n = 2I, k = H; FC2: n = H, k = I).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4cl::bench {

struct ModelPreset {
  const char* name;
  std::int64_t hidden;        // H
  std::int64_t intermediate;  // I, per expert
  std::int64_t experts;       // E, routed
  int top_k;                  // k
  const char* routing;
  const char* notes;
  bool gpt_oss_activation = false;  // gpt-oss's clamped SwiGLU and expert biases (MoeActivation::gpt_oss)
  bool deepseek_gate = false;       // router logits: MoeLogitRouting::deepseek_v3 (sigmoid, 8 groups, 4 kept, × 2.5)
};

const std::vector<ModelPreset>& model_presets();

// The preset named `name`; throws fp4cl::Error listing the valid names.
const ModelPreset& find_preset(const std::string& name);

// "qwen3-30b-a3b, qwen3-235b-a22b, ..."
std::string preset_names();

}  // namespace fp4cl::bench
