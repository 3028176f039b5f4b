// MoE routing from router logits: plain softmax top-k, and vLLM's grouped_topk, which is
// DeepSeek-V3's "noaux_tc" gate (include/fp4cl/moe_logit_routing.hpp has the formula), a
// work-group a token of the chunk (moe_route_token.cl's route_token, with ROUTE_LOCAL work-items).
// A token's work-group takes 8 µs on an H200 for 256 experts where one work-item a token
// (moe_route.cl's moe_route_logits, for CPUs) took 54 (2026-12-05).
//
// Build-time parameters: moe_route_token.cl's, and ROUTE_LOCAL (work-items a token), ROUTE_PAIRS
// (pairs a token: the k routed slots, then the shared experts', moe_route.cl's pair_stride; at
// most ROUTE_LOCAL), ROUTE_SHARED_FIRST (the first shared expert's local id).
//
// Arguments: logits [tokens, E_global] fp32 (the caller's; token t of the chunk at token_offset +
// t); renormalize (1: divide the k weights by their sum in slot order), scaling (× every weight
// last), bias [E_global] (ROUTE_BIAS); the rest as moe_route.cl's: expert_map [E_global] -> local
// id or -1, pair_expert / pair_weight [chunk pairs] (written), status (never written: every
// chosen id is valid).

#include "moe_expert_map.cl"
#include "moe_route_token.cl"

__kernel __attribute__((reqd_work_group_size(ROUTE_LOCAL, 1, 1))) void moe_route_grouped(
    __global const float* logits, int num_tokens, int token_offset, int renormalize, float scaling,
    __global const float* bias, __global const int* expert_map, int num_local, __global int* pair_expert,
    __global float* pair_weight, __global int* status) {
  __local float score[ROUTE_EXPERTS], key[ROUTE_EXPERTS], part[ROUTE_LOCAL], group_score[ROUTE_GROUPS];
  __local int kept[ROUTE_GROUPS], chosen[ROUTE_TOPK];
  const int t = get_group_id(0), lid = get_local_id(0);
  if (t >= num_tokens) return;  // uniform over the work-group
  route_token(logits + ((long)token_offset + t) * ROUTE_EXPERTS, bias, lid, ROUTE_LOCAL, score, key, kept, chosen,
              part, group_score);

  // Slot s: route_slot_weight; then the shared experts' slots, weight 1.
  if (lid >= ROUTE_TOPK && lid < ROUTE_PAIRS) {
    pair_expert[t * ROUTE_PAIRS + lid] = ROUTE_SHARED_FIRST + lid - ROUTE_TOPK;
    pair_weight[t * ROUTE_PAIRS + lid] = 1.0f;
  }
  if (lid < ROUTE_TOPK) {
    const int p = t * ROUTE_PAIRS + lid;
    const long g = ((long)token_offset + t) * ROUTE_TOPK + lid;
    pair_expert[p] = moe_map_expert(chosen[lid], ROUTE_EXPERTS, expert_map, num_local, g, status);
    pair_weight[p] = route_slot_weight(score, chosen, lid, renormalize, scaling);
  }
}
