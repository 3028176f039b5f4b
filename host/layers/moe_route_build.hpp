// The build-time parameters of one token's routing from router logits (kernels/moe_route_token.cl)
// for a layer: those of its router kernel (moe_route_grouped.cl) and of the FC1 that routes
// router logits itself (moe_mma.cl's MMA_ROUTE_LOGITS), the same for both, so that a token gets
// the same experts and weight bits whichever kernel routes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp4cl/device.hpp"
#include "fp4cl/moe_logit_routing.hpp"
#include "fp4cl/program_cache.hpp"

namespace fp4cl {

struct MoeRouteBuild {
  std::int64_t experts = 1;  // ROUTE_EXPERTS: E_global
  int groups = 1, top_groups = 1, top_k = 1;  // ROUTE_GROUPS, ROUTE_TOP_GROUPS, ROUTE_TOPK (routed slots)
  // ROUTE_LOCAL: the softmax's partials, and the router kernel's work-items a token: a power of
  // two covering max(E_global, pairs a token), at most 256 and the device's work-group limit.
  std::size_t local = 1;
  bool sigmoid = false, bias = false, logit_keys = false;  // ROUTE_SIGMOID, ROUTE_BIAS, ROUTE_LOGIT_KEYS

  // Adds the ROUTE_* defines above to `b`.
  void define(BuildOptions& b) const;
  // Local memory of one token's routing in a work-group (route_token's arrays, moe_route_token.cl).
  std::uint64_t scratch_bytes() const;
};

// For `global_experts` experts, `routed_k` routed slots a token and `pairs` pairs a token (the
// routed slots and the shared experts') under `routing` (which check_moe_logit_routing accepted
// and whose `unsupported` is empty).
MoeRouteBuild moe_route_build(const DeviceInfo& device, std::int64_t global_experts, int routed_k, int pairs,
                              const MoeLogitRouting& routing);

}  // namespace fp4cl
