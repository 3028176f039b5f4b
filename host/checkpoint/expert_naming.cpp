// The expert naming conventions fp4cl recognizes, and parsing module names against them.
#include "checkpoint/expert_naming.hpp"

#include <fmt/format.h>

#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

// Add a convention here to load its MoE layers; nothing else names projections.
constexpr ExpertNaming kExpertNamings[] = {
    {"Qwen3-MoE / DeepSeek", "mlp.experts", "gate_proj", "up_proj", "down_proj"},
    {"Mixtral", "block_sparse_moe.experts", "w1", "w3", "w2"},
};

constexpr ExpertProjection kProjections[] = {ExpertProjection::gate, ExpertProjection::up, ExpertProjection::down};

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

const char* to_string(ExpertProjection projection) {
  switch (projection) {
    case ExpertProjection::gate:
      return "gate";
    case ExpertProjection::up:
      return "up";
    case ExpertProjection::down:
      return "down";
  }
  return "?";
}

std::string_view ExpertNaming::projection_name(ExpertProjection projection) const {
  switch (projection) {
    case ExpertProjection::gate:
      return gate;
    case ExpertProjection::up:
      return up;
    case ExpertProjection::down:
      return down;
  }
  return {};
}

std::string ExpertNaming::module(std::string_view layer, std::int64_t expert, ExpertProjection projection) const {
  return fmt::format("{}.{}.{}", layer, expert, projection_name(projection));
}

std::optional<std::string> container_prefix(std::string_view layer, std::string_view container) {
  if (layer == container) return std::string();
  if (layer.size() > container.size() &&
      layer.compare(layer.size() - container.size(), container.size(), container) == 0 &&
      layer[layer.size() - container.size() - 1] == '.')
    return std::string(layer.substr(0, layer.size() - container.size() - 1));
  return std::nullopt;
}

std::optional<ExpertModuleName> parse_expert_module(std::string_view module) {
  // "<layer>.<e>.<projection>"
  const std::size_t proj_dot = module.rfind('.');
  if (proj_dot == std::string_view::npos || proj_dot == 0) return std::nullopt;
  const std::string_view projection = module.substr(proj_dot + 1);
  const std::size_t expert_dot = module.rfind('.', proj_dot - 1);
  if (expert_dot == std::string_view::npos) return std::nullopt;
  const std::string_view expert = module.substr(expert_dot + 1, proj_dot - expert_dot - 1);
  if (!all_digits(expert)) return std::nullopt;
  const std::string_view layer = module.substr(0, expert_dot);

  for (const ExpertNaming& naming : kExpertNamings) {
    std::optional<std::string> prefix = container_prefix(layer, naming.container);
    if (!prefix) continue;
    for (ExpertProjection p : kProjections) {
      if (naming.projection_name(p) != projection) continue;
      if (expert.size() > 7 || std::stoll(std::string(expert)) >= kMaxExperts) {
        fail("module '{}': expert index {} is not below {}, the most experts fp4cl accepts", module, expert,
             kMaxExperts);
      }
      ExpertModuleName name;
      name.naming = &naming;
      name.layer = std::string(layer);
      name.prefix = std::move(*prefix);
      name.expert = std::stoll(std::string(expert));
      name.projection = p;
      return name;
    }
  }
  return std::nullopt;
}

}  // namespace fp4cl::detail
