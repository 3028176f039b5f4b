#include "layers/moe_route_build.hpp"

#include <algorithm>

namespace fp4cl {

MoeRouteBuild moe_route_build(const DeviceInfo& device, std::int64_t global_experts, int routed_k, int pairs,
                              const MoeLogitRouting& r) {
  MoeRouteBuild b;
  b.experts = global_experts;
  b.groups = r.groups;
  b.top_groups = r.top_groups;
  b.top_k = routed_k;
  const auto needed = static_cast<std::size_t>(std::max<std::int64_t>(global_experts, pairs));
  while (b.local < 256 && b.local < needed && b.local * 2 <= device.max_work_group_size) b.local *= 2;
  b.sigmoid = r.scoring == MoeLogitRouting::Scoring::sigmoid;
  b.bias = !r.correction_bias.empty();
  b.logit_keys = r.plain_softmax();
  return b;
}

void MoeRouteBuild::define(BuildOptions& b) const {
  b.define("ROUTE_EXPERTS", experts)
      .define("ROUTE_GROUPS", groups)
      .define("ROUTE_TOP_GROUPS", top_groups)
      .define("ROUTE_TOPK", top_k)
      .define("ROUTE_LOCAL", static_cast<long long>(local))
      .define("ROUTE_SIGMOID", sigmoid ? 1 : 0)
      .define("ROUTE_BIAS", bias ? 1 : 0)
      .define("ROUTE_LOGIT_KEYS", logit_keys ? 1 : 0);
}

std::uint64_t MoeRouteBuild::scratch_bytes() const {
  // score and key [E], part [ROUTE_LOCAL], group_score [G] floats; kept [G], chosen [k] ints.
  return 4u * (2u * static_cast<std::uint64_t>(experts) + local + 2u * static_cast<std::uint64_t>(groups) +
               static_cast<std::uint64_t>(top_k));
}

}  // namespace fp4cl
