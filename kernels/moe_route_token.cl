// One token's routing from its router logits, by a work-group: plain softmax top-k or vLLM's
// grouped_topk (DeepSeek-V3's "noaux_tc" gate; include/fp4cl/moe_logit_routing.hpp has the
// formula). moe_route_grouped.cl runs it a work-group a token; moe_mma.cl's one-token and routed
// FC1 run it before their K loops (MMA_ROUTE_LOGITS), so that a decode call with router logits
// launches no router.
//
// The work-items score the token's experts into local memory, rank the groups, then rank the kept
// experts; the expert of rank s < k is slot s. A rank counts the entries ahead in the order (key
// descending, index ascending; NaN keys as -inf), a total order, so every rank is one work-item's
// alone: no atomics. The softmax's max and sum are each a fixed tree over ROUTE_LOCAL strided
// partials, whatever the work-group's size: a work-group of `nwi` work-items computes the
// partials of lanes lid, lid + nwi, ... (< ROUTE_LOCAL) in the same order, so every caller gets the
// same bits. Plain softmax top-k (ROUTE_LOGIT_KEYS) ranks the logits themselves: top-k by logit
// value, the weights exp(l - max) / sum, as moe_route.cl's moe_route_logits (CPUs) does.
//
// Build-time parameters: ROUTE_EXPERTS (E_global), ROUTE_GROUPS (G, divides E_global),
// ROUTE_TOP_GROUPS, ROUTE_TOPK (k <= ROUTE_TOP_GROUPS · E_global / G, the host checks),
// ROUTE_LOCAL (the partials' lanes: a power of two), ROUTE_SIGMOID (else softmax), ROUTE_BIAS (a
// correction bias), ROUTE_LOGIT_KEYS (1: plain softmax top-k; softmax, one group, no bias).
#ifndef FP4CL_MOE_ROUTE_TOKEN_CL
#define FP4CL_MOE_ROUTE_TOKEN_CL

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

// Routes the token of logits l [ROUTE_EXPERTS] (bias [ROUTE_EXPERTS] under ROUTE_BIAS) in local
// memory: score [ROUTE_EXPERTS] (s_e), key [ROUTE_EXPERTS] (c_e = s_e + bias_e, NaN as -inf),
// kept [ROUTE_GROUPS] (1: the group is among the top_groups), chosen [ROUTE_TOPK] (slot -> global
// expert), part [ROUTE_LOCAL] (the softmax's partials), group_score [ROUTE_GROUPS]; leaves chosen
// and score filled. Called by the whole work-group (lid of nwi work-items); ends with a barrier. A
// caller that routes another token in the same arrays puts a barrier between its reads of this
// one's and that call.
inline void route_token(const __global float* l, __global const float* bias, int lid, int nwi, __local float* score,
                        __local float* key, __local int* kept, __local int* chosen, __local float* part,
                        __local float* group_score) {
#if ROUTE_SIGMOID
  for (int e = lid; e < ROUTE_EXPERTS; e += nwi) score[e] = 1.0f / (1.0f + exp(-l[e]));
#else
  // Softmax: the max and the sum each over a fixed tree of ROUTE_LOCAL strided partials.
  for (int v = lid; v < ROUTE_LOCAL; v += nwi) {
    float m = -INFINITY;
    for (int e = v; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) m = fmax(m, l[e]);
    part[v] = m;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = ROUTE_LOCAL / 2; w > 0; w /= 2) {
    for (int v = lid; v < w; v += nwi) part[v] = fmax(part[v], part[v + w]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float m = part[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int v = lid; v < ROUTE_LOCAL; v += nwi) {
    float sum = 0.0f;
    for (int e = v; e < ROUTE_EXPERTS; e += ROUTE_LOCAL) {
      const float p = exp(l[e] - m);
      score[e] = p;
      sum += p;
    }
    part[v] = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = ROUTE_LOCAL / 2; w > 0; w /= 2) {
    for (int v = lid; v < w; v += nwi) part[v] += part[v + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float sum = part[0];
  for (int e = lid; e < ROUTE_EXPERTS; e += nwi) score[e] /= sum;
#endif
  (void)bias, (void)part, (void)group_score;
  for (int e = lid; e < ROUTE_EXPERTS; e += nwi)
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
  for (int g = lid; g < ROUTE_GROUPS; g += nwi) {
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
  for (int g = lid; g < ROUTE_GROUPS; g += nwi) {
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
  for (int e = lid; e < ROUTE_EXPERTS; e += nwi) {
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
}

// Slot s's weight (s < ROUTE_TOPK) after route_token: its score (without the bias), renormalized
// in slot order by the scores' sum + 1e-20 as DeepSeek-V3's gate does (scores that all underflow
// to 0 give weights 0, not 0 / 0; a sum of at least 2^-40 comes out of the addition unchanged),
// then scaled.
inline float route_slot_weight(__local const float* score, __local const int* chosen, int s, int renormalize,
                               float scaling) {
  float w = score[chosen[s]];
  if (renormalize) {
    float psum = 0.0f;
    for (int j = 0; j < ROUTE_TOPK; ++j) psum += score[chosen[j]];
    w /= psum + 1e-20f;
  }
  return w * scaling;
}

#endif  // FP4CL_MOE_ROUTE_TOKEN_CL
