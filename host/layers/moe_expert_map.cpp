#include "layers/moe_expert_map.hpp"

#include <numeric>

#include "support/check.hpp"

namespace fp4cl {

std::vector<std::int32_t> resolve_expert_map(const std::vector<std::int32_t>& map, std::int64_t num_local) {
  if (num_local < 1) fail("MoE: the layer has {} local experts; at least 1 is needed", num_local);
  if (map.empty()) {
    std::vector<std::int32_t> identity(static_cast<std::size_t>(num_local));
    std::iota(identity.begin(), identity.end(), 0);
    return identity;
  }
  std::vector<std::int64_t> named_by(static_cast<std::size_t>(num_local), -1);
  for (std::size_t g = 0; g < map.size(); ++g) {
    const std::int32_t local = map[g];
    if (local == -1) continue;
    if (local < 0 || local >= num_local)
      fail("MoE expert_map[{}] = {}: expected -1 or a local expert id in [0, {})", g, local, num_local);
    auto& first = named_by[static_cast<std::size_t>(local)];
    if (first >= 0)
      fail("MoE expert_map[{}] and expert_map[{}] both name local expert {}: each local expert has one global id",
           first, g, local);
    first = static_cast<std::int64_t>(g);
  }
  return map;
}

}  // namespace fp4cl
