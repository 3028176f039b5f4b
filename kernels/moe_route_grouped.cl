// MoE routing from router logits: plain softmax top-k, and vLLM's grouped_topk, which is
// DeepSeek-V3's "noaux_tc" gate (include/fp4cl/moe_logit_routing.hpp has the formula). One
// work-group per token of the chunk: its work-items score the token's experts into local memory,
// rank the groups, then rank the kept experts; the expert of rank s < k is slot s. A rank counts
// the entries ahead in the order (key descending, index ascending; NaN keys as -inf), a total
// order, so every rank is one work-item's alone: no atomics, no reduction whose order could vary.
// Plain softmax top-k (ROUTE_LOGIT_KEYS, on GPUs) ranks the logits themselves: top-k by logit
// value, the weights exp(l - max) / sum, as moe_route.cl's moe_route_logits (CPUs) does. A
// token's work-group takes 8 µs on an H200 for 256 experts where one work-item a token took 54
// (2026-12-05).
//
// Build-time parameters: ROUTE_EXPERTS (E_global), ROUTE_GROUPS (G, divides E_global),
// ROUTE_TOP_GROUPS, ROUTE_TOPK (k <= ROUTE_TOP_GROUPS · E_global / G, the host checks),
// ROUTE_LOCAL (work-items a token), ROUTE_SIGMOID (else softmax), ROUTE_BIAS (a correction bias),
// ROUTE_PAIRS (pairs a token: the k routed slots, then the shared experts', moe_route.cl's
// pair_stride; at most ROUTE_LOCAL), ROUTE_SHARED_FIRST (the first shared expert's local id),
// ROUTE_LOGIT_KEYS (1: plain softmax top-k, keys the logits; softmax, one group, no bias).
//
// Arguments: logits [tokens, E_global] fp32 (the caller's; token t of the chunk at token_offset +
// t); renormalize (1: divide the k weights by their sum in slot order), scaling (× every weight
// last), bias [E_global] (ROUTE_BIAS); the rest as moe_route.cl's: expert_map [E_global] -> local
// id or -1, pair_expert / pair_weight [chunk pairs] (written), status (never written: every
// chosen id is valid).

#include "moe_expert_map.cl"

#ifndef ROUTE_LOGIT_KEYS
#define ROUTE_LOGIT_KEYS 0
#endif
#if ROUTE_LOGIT_KEYS && (ROUTE_SIGMOID || ROUTE_BIAS || ROUTE_GROUPS != 1)
#error "ROUTE_LOGIT_KEYS: plain softmax top-k (no sigmoid, no bias, one group)"
#endif
#define ROUTE_PER_GROUP (ROUTE_EXPERTS / ROUTE_GROUPS)
// Experts compared between two looks at whether the rank reached k.
#define ROUTE_RANK_STEP 32

inline float route_key(float v) { return isnan(v) ? -INFINITY : v; }
// Whether (key a, index ia) comes before (key b, index ib): larger key first, then lower index.
inline int route_ahead(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

__kernel __attribute__((reqd_work_group_size(ROUTE_LOCAL, 1, 1))) void moe_route_grouped(
    __global const float* logits, int num_tokens, int token_offset, int renormalize, float scaling,
    __global const float* bias, __global const int* expert_map, int num_local, __global int* pair_expert,
    __global float* pair_weight, __global int* status) {
  __local float score[ROUTE_EXPERTS];  // s_e
  __local float key[ROUTE_EXPERTS];    // c_e = s_e + bias_e, NaN as -inf
  __local int kept[ROUTE_GROUPS];      // 1: the group is among the top_groups
  __local int chosen[ROUTE_TOPK];      // slot -> expert
#if !ROUTE_SIGMOID
  __local float part[ROUTE_LOCAL];
#endif
  const int t = get_group_id(0), lid = get_local_id(0);
  if (t >= num_tokens) return;  // uniform over the work-group
  const __global float* l = logits + ((long)token_offset + t) * ROUTE_EXPERTS;

#if ROUTE_SIGMOID
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) score[e] = 1.0f / (1.0f + exp(-l[e]));
#else
  // Softmax: the max and the sum each over a fixed tree of the work-items' strided partials.
  float m = -INFINITY;
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) m = fmax(m, l[e]);
  part[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = ROUTE_LOCAL / 2; w > 0; w /= 2) {
    if (lid < w) part[lid] = fmax(part[lid], part[lid + w]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = part[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0.0f;
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) {
    const float p = exp(l[e] - m);
    score[e] = p;
    sum += p;
  }
  part[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = ROUTE_LOCAL / 2; w > 0; w /= 2) {
    if (lid < w) part[lid] += part[lid + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  sum = part[0];
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) score[e] /= sum;
#endif
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL)
#if ROUTE_LOGIT_KEYS
    key[e] = route_key(l[e]);
#elif ROUTE_BIAS
    key[e] = route_key(score[e] + bias[e]);
#else
    key[e] = route_key(score[e]);
#endif
  barrier(CLK_LOCAL_MEM_FENCE);

#if ROUTE_GROUPS > 1
  // Each group's score (with a bias the sum of its two largest keys, else its largest), then its
  // rank among the groups.
  __local float group_score[ROUTE_GROUPS];
  for (int g = lid; g < ROUTE_GROUPS; g += ROUTE_LOCAL) {
    float first = -INFINITY, second = -INFINITY;
    for (int j = 0; j < ROUTE_PER_GROUP; ++j) {
      const float c = key[g * ROUTE_PER_GROUP + j];
      if (c > first) {
        second = first;
        first = c;
      } else if (c > second) {
        second = c;
      }
    }
#if ROUTE_BIAS
    group_score[g] = route_key(first + second);
#else
    group_score[g] = first;
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int g = lid; g < ROUTE_GROUPS; g += ROUTE_LOCAL) {
    int rank = 0;
    for (int h = 0; h < ROUTE_GROUPS; ++h) rank += route_ahead(group_score[h], h, group_score[g], g);
    kept[g] = rank < ROUTE_TOP_GROUPS;
  }
#else
  if (lid == 0) kept[0] = 1;
#endif
  barrier(CLK_LOCAL_MEM_FENCE);

  // The rank of each kept expert among the kept ones (the kept groups' experts only); counting
  // stops at k (not chosen).
  for (int e = lid; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) {
    if (!kept[e / ROUTE_PER_GROUP]) continue;
    const float c = key[e];
    int rank = 0;
    for (int g = 0; g < ROUTE_GROUPS && rank < ROUTE_TOPK; ++g) {
      if (!kept[g]) continue;
      const int end = (g + 1) * ROUTE_PER_GROUP;
      for (int f0 = g * ROUTE_PER_GROUP; f0 < end && rank < ROUTE_TOPK; f0 += ROUTE_RANK_STEP)
        for (int f = f0; f < min(f0 + ROUTE_RANK_STEP, end); ++f) rank += route_ahead(key[f], f, c, e);
    }
    if (rank < ROUTE_TOPK) chosen[rank] = e;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  // Slot s: the score (without the bias), renormalized in slot order, then scaled; then the shared
  // experts' slots, weight 1.
  if (lid >= ROUTE_TOPK && lid < ROUTE_PAIRS) {
    pair_expert[t * ROUTE_PAIRS + lid] = ROUTE_SHARED_FIRST + lid - ROUTE_TOPK;
    pair_weight[t * ROUTE_PAIRS + lid] = 1.0f;
  }
  if (lid < ROUTE_TOPK) {
    const int e = chosen[lid];
    float w = score[e];
    if (renormalize) {
      float psum = 0.0f;
      for (int s = 0; s < ROUTE_TOPK; ++s) psum += score[chosen[s]];
      w /= psum;
    }
    const int p = t * ROUTE_PAIRS + lid;
    const long g = ((long)token_offset + t) * ROUTE_TOPK + lid;
    pair_expert[p] = moe_map_expert(e, ROUTE_EXPERTS, expert_map, num_local, g, status);
    pair_weight[p] = w * scaling;
  }
}
