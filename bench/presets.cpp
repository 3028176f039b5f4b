#include "presets.hpp"

#include "fp4cl/error.hpp"

namespace fp4cl::bench {

const std::vector<ModelPreset>& model_presets() {
  // ../shared/spec/MODELS.md: H, I, E, k per layer (routed experts only).
  static const std::vector<ModelPreset> presets = {
      {"qwen3-30b-a3b", 2048, 768, 128, 8, "softmax top-k, renormalize", "48 layers"},
      {"qwen3-235b-a22b", 4096, 1536, 128, 8, "softmax top-k, renormalize", "94 layers"},
      {"mixtral-8x7b", 4096, 14336, 8, 2, "softmax top-k, renormalize", "32 layers"},
      {"deepseek-v3", 7168, 2048, 256, 8, "sigmoid, grouped top-k, bias, scaling factor", "plus one shared expert",
       false, true},
      {"gpt-oss-20b", 2880, 2880, 32, 4, "softmax over top-k", "clamped SwiGLU with biases; 2880 % 128 != 0", true},
  };
  return presets;
}

std::string preset_names() {
  std::string s;
  for (const ModelPreset& p : model_presets()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

const ModelPreset& find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets())
    if (name == p.name) return p;
  throw Error("unknown --preset '" + name + "'; presets: " + preset_names());
}

}  // namespace fp4cl::bench
