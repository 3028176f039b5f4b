// MoE routing: one work-item per token of the chunk, from top-k ids, or from router logits by
// plain softmax top-k on CPUs (elsewhere moe_route_grouped.cl, a work-group a token, routes
// those). Writes, for each (token, slot) pair
// p = t·k + s of the chunk, the local expert (or -1: not on this rank, or an invalid id) and the
// routing weight.
//
// Invalid ids never index memory (moe_expert_map.cl): the pair is dropped and the smallest
// global pair index with one is recorded in status[0] (status[1]: an expert_map entry out of range).
//
// Arguments shared by both kernels:
//   num_tokens    tokens in this chunk; token_offset its first token in the caller's tensors
//   num_global    E_global; expert_map [E_global] -> local id or -1; num_local = E_local
//   pair_expert   [chunk pairs] local expert or -1;  pair_weight [chunk pairs]
//   pair_stride   pairs a token: top_k routed slots, then pair_stride - top_k shared experts
//                 (MoeConfig::shared_experts), slot top_k + j the local expert shared_first + j
//                 with weight 1

#include "moe_expert_map.cl"

// Token t's shared-expert slots.
inline void moe_route_shared(int t, int top_k, int pair_stride, int shared_first, __global int* pair_expert,
                             __global float* pair_weight) {
  for (int s = top_k; s < pair_stride; ++s) {
    pair_expert[t * pair_stride + s] = shared_first + s - top_k;
    pair_weight[t * pair_stride + s] = 1.0f;
  }
}

__kernel void moe_route_topk(__global const int* topk_ids, __global const float* topk_weights, int num_tokens,
                             int token_offset, int top_k, int num_global, __global const int* expert_map,
                             int num_local, __global int* pair_expert, __global float* pair_weight,
                             __global int* status, int pair_stride, int shared_first) {
  const int t = get_global_id(0);
  if (t >= num_tokens) return;
  for (int s = 0; s < top_k; ++s) {
    const int p = t * pair_stride + s;
    const long g = ((long)token_offset + t) * top_k + s;
    pair_expert[p] = moe_map_expert(topk_ids[g], num_global, expert_map, num_local, g, status);
    pair_weight[p] = topk_weights[g];
  }
  moe_route_shared(t, top_k, pair_stride, shared_first, pair_expert, pair_weight);
}

// Softmax over the token's E_global logits (max-subtracted, summed in expert order), top-k by
// logit value with ties to the lower expert index (NaN ranks below every number), weights
// exp(l - max) / sum, optionally divided by their sum in slot order.
__kernel void moe_route_logits(__global const float* logits, int num_tokens, int token_offset, int top_k,
                               int renormalize, int num_global, __global const int* expert_map, int num_local,
                               __global int* pair_expert, __global float* pair_weight, __global int* status,
                               int pair_stride, int shared_first) {
  const int t = get_global_id(0);
  if (t >= num_tokens) return;
  const __global float* l = logits + ((long)token_offset + t) * num_global;
  float m = -INFINITY;
  for (int e = 0; e < num_global; ++e) m = fmax(m, l[e]);
  float sum = 0.0f;
  for (int e = 0; e < num_global; ++e) sum += exp(l[e] - m);
  // Slot s takes the best expert below the previous pick in the order (key desc, index asc).
  float prev_key = INFINITY;
  int prev = -1;
  float psum = 0.0f;
  for (int s = 0; s < top_k; ++s) {
    int best = -1;
    float best_key = -INFINITY;
    for (int e = 0; e < num_global; ++e) {
      const float key = isnan(l[e]) ? -INFINITY : l[e];
      const bool after_prev = prev < 0 || key < prev_key || (key == prev_key && e > prev);
      if (after_prev && (best < 0 || key > best_key)) {
        best = e;
        best_key = key;
      }
    }
    prev = best;
    prev_key = best_key;
    const int p = t * pair_stride + s;
    const long g = ((long)token_offset + t) * top_k + s;
    const float w = exp(l[best] - m) / sum;
    psum += w;
    pair_expert[p] = moe_map_expert(best, num_global, expert_map, num_local, g, status);
    pair_weight[p] = w;
  }
  if (renormalize) {
    for (int s = 0; s < top_k; ++s) pair_weight[t * pair_stride + s] /= psum;
  }
  moe_route_shared(t, top_k, pair_stride, shared_first, pair_expert, pair_weight);
}
