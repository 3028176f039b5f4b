// How models name the projections of their routed experts, as data: one row per convention.
// An expert projection is "<layer>.<container>.<e>.<projection>", e.g.
// "model.layers.3.mlp.experts.17.gate_proj" (Qwen3-MoE, DeepSeek) or
// "model.layers.3.block_sparse_moe.experts.5.w1" (Mixtral, whose w1 is the gate, w3 the up and
// w2 the down projection).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4cl::detail {

enum class ExpertProjection { gate, up, down };
const char* to_string(ExpertProjection projection);  // "gate" / "up" / "down"

struct ExpertNaming {
  std::string_view convention;  // "Qwen3-MoE / DeepSeek"
  std::string_view container;   // "mlp.experts"
  std::string_view gate;        // "gate_proj"
  std::string_view up;          // "up_proj"
  std::string_view down;        // "down_proj"

  std::string_view projection_name(ExpertProjection projection) const;
  // "<layer>.<e>.<projection>": the module of one expert projection of MoE layer `layer`.
  std::string module(std::string_view layer, std::int64_t expert, ExpertProjection projection) const;
};

// Experts index at most this many (a larger index in a tensor name is an error, not a layer).
constexpr std::int64_t kMaxExperts = 1 << 20;

// A module name understood as one expert's projection.
struct ExpertModuleName {
  const ExpertNaming* naming = nullptr;
  std::string layer;   // "<prefix>.<container>", e.g. "model.layers.3.mlp.experts"
  std::string prefix;  // the decoder layer, e.g. "model.layers.3" (empty when there is none)
  std::int64_t expert = 0;
  ExpertProjection projection = ExpertProjection::gate;
};

// The decoder layer of MoE layer `layer` ("<prefix>.<container>"): "model.layers.3" for
// "model.layers.3.mlp.experts" and container "mlp.experts"; nothing when `layer` is not in such a
// container, "" when it is the container itself.
std::optional<std::string> container_prefix(std::string_view layer, std::string_view container);

// `module` as an expert projection of a known convention, or nothing when it is not one. Throws
// fp4cl::Error for an expert index of kMaxExperts or more.
std::optional<ExpertModuleName> parse_expert_module(std::string_view module);

}  // namespace fp4cl::detail
