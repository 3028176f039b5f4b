// MoE for few (token, expert) pairs on GPUs: every matrix row is split over SPLIT_LANES*
// work-items (split-K inside a work-group), so that even one token fills the device with
// work-groups, and the routing's pairs need no sorting.
//
//   moe_split_fc1  one work-group per (tile of intermediate rows, pair): routes the pair itself
//                  when the caller gave top-k ids (no routing kernel), stages the token (BF16 →
//                  fp32; W4A4: quantized per block with the expert's input scale) in local
//                  memory, streams the tile's gate and up rows, and writes
//                  a = bf16(silu(g) × up) (W4A4: quantized per block) to x2 [pairs, I]. Built with
//                  SPLIT_PAIRS > 1 (chunks of several tokens), one pass over an expert's rows
//                  serves up to SPLIT_PAIRS of its pairs.
//   moe_split_fc2  one work-group per (tile of output rows, token): all k slots of the token at
//                  once (slot lanes), partial sums reduced in local memory in a fixed order:
//                  out[t, n] = Σ_s w[t,s] · fc2_factor[e_s] · (W2[e_s] x2[t·k+s])[n].
//
// Weight layout: the "split layout" of common/fp4_split.cl (host/prepare/fp4_split_layout.cpp),
// per matrix [E, N, K] (E·N rows of K) with L lanes per row: lane l reads uint4 word l of each
// step of 32·L elements (coalesced 128-bit loads), its activations the eight float4 at
// s·32L + 4L·q + 4l (neighbouring lanes, neighbouring activations), its block scales one uint2.
//
// Build-time parameters: MOE_NVFP4 (else MXFP4), MOE_W4A4, MOE_OUT_BF16, MOE_E2M1_NO_DENORM;
//   FC1: SPLIT_LANES1 (L for K = H), SPLIT_LOCAL1 (work-group size, a multiple of SPLIT_LANES1),
//        SPLIT_PAIRS (pairs per pass, default 1; > 1 needs at most SPLIT_MAX_PAIRS pairs a chunk),
//        SPLIT_RPG (rows per lane group; W4A4 needs SPLIT_LOCAL1 / SPLIT_LANES1 · SPLIT_RPG to be
//        a multiple of the block), SPLIT_HIDDEN (H, for the local copy of the token);
//   FC2: SPLIT_LANES2 (L for K = I), SPLIT_SLOTS (slot lanes, ≤ k), SPLIT_ROWS2 (rows per group).
//   (An FC2 with passes shared by an expert's pairs plus a separate top-k sum was measured on an
//   H100 at mixtral-8x7b T = 8: 600 µs against this one's 508 µs; removed.)
#define MOE_VEC 1
#include "moe_fp4_vec.cl"
#include "moe_quant.cl"
#include "moe_expert_map.cl"

#define SPLIT_STEP1 (32 * SPLIT_LANES1)
#define SPLIT_STEP2 (32 * SPLIT_LANES2)
// The E2M1 and scale decodes and the one-pair dot step are the split layout's shared ones
// (common/fp4_split.cl; split_dot_pairs_regs below does the same operations for several pairs).
#ifdef MOE_NVFP4
#define FP4_SPLIT_NVFP4
#endif
#ifdef MOE_E2M1_NO_DENORM
#define FP4_SPLIT_E2M1_NO_DENORM
#endif
#include "common/fp4_split.cl"
#define SPLIT_GROUPS(lanes) FP4_SPLIT_GROUPS(lanes, MOE_BLOCK)
#define split_scales fp4_split_scales
#define split_dot_step_global fp4_split_dot_step_global

#ifndef SPLIT_PAIRS
#define SPLIT_PAIRS 1
#endif
#define SPLIT_MAX_PAIRS 512  // the chunk's pairs, at most, when SPLIT_PAIRS > 1


// fp4_split_dot_step_local for SPLIT_PAIRS pairs of one expert at once, with each pair's
// activations already in registers (x[j][q]: its vload4(0, x + q * stride) for pair j), so that
// several rows reuse one read of them: each weight is decoded once and meets every pair's
// activations; acc[j] += pair j's sum, with the same operations in the same order (two
// chains). No branch on the pairs actually served: callers point unused slots at a served pair
// and ignore those sums (constant indices keep every array in registers).
inline void split_dot_pairs_regs(uint4 w, const float* s, float4 x[SPLIT_PAIRS][8], float* acc) {
  const uint words[4] = {w.x, w.y, w.z, w.w};
  float c0[SPLIT_PAIRS], c1[SPLIT_PAIRS];
#pragma unroll
  for (int j = 0; j < SPLIT_PAIRS; ++j) {
    c0[j] = 0.0f;
    c1[j] = 0.0f;
  }
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint word = words[q / 2];
    const int j0 = 4 * (q % 2);
    const float a = fp4_split_e2m1(word, j0) * s[q], b = fp4_split_e2m1(word, j0 + 1) * s[q];
    const float c = fp4_split_e2m1(word, j0 + 2) * s[q], d = fp4_split_e2m1(word, j0 + 3) * s[q];
#pragma unroll
    for (int j = 0; j < SPLIT_PAIRS; ++j) {
      c0[j] = fma(a, x[j][q].x, c0[j]);
      c1[j] = fma(b, x[j][q].y, c1[j]);
      c0[j] = fma(c, x[j][q].z, c0[j]);
      c1[j] = fma(d, x[j][q].w, c1[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < SPLIT_PAIRS; ++j) acc[j] += c0[j] + c1[j];
}

// The local expert of pair q of the chunk: from the caller's topk ids (route_fused) or from
// pair_expert (written by the logit router or moe_split_fc1).
inline int split_expert_of(int q, int route_fused, __global const int* topk_ids, long first_pair, int num_global,
                           __global const int* expert_map, int num_local, __global const int* pair_expert) {
  return route_fused ? moe_local_expert(topk_ids[first_pair + q], num_global, expert_map, num_local) : pair_expert[q];
}

#if SPLIT_PAIRS > 1
// The pairs one pass over expert e's rows serves, for the work-group of pair p (all its
// work-items call this): the chunk's pairs of e in chunk order, in runs of SPLIT_PAIRS, each run
// served by the work-group of its first pair. Returns how many pairs this work-group serves (0:
// another one serves p) and lists them in plist, using `same` (a bit set of the chunk's pairs of
// e) and `served` as local scratch.
inline int split_pass(int p, int e, int pairs, int route_fused, __global const int* topk_ids, long first_pair,
                      int num_global, __global const int* expert_map, int num_local, __global const int* pair_expert,
                      __local uint* same, __local int* plist, __local int* served, int lid, int local_size) {
  for (int i = lid; i < SPLIT_MAX_PAIRS / 32; i += local_size) same[i] = 0u;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int q = lid; q < pairs; q += local_size) {
    if (split_expert_of(q, route_fused, topk_ids, first_pair, num_global, expert_map, num_local, pair_expert) == e)
      atomic_or(&same[q / 32], 1u << (q % 32));
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    int rank = popcount(same[p / 32] & ((1u << (p % 32)) - 1u));
    for (int i = 0; i < p / 32; ++i) rank += popcount(same[i]);
    int n = 0;
    if (rank % SPLIT_PAIRS == 0) {
      for (int i = p / 32; i < (pairs + 31) / 32 && n < SPLIT_PAIRS; ++i) {
        uint bits = same[i] & (i == p / 32 ? ~((1u << (p % 32)) - 1u) : 0xFFFFFFFFu);
        while (bits != 0u && n < SPLIT_PAIRS) {
          const uint low = bits & (0u - bits);
          plist[n++] = i * 32 + (31 - (int)clz(low));
          bits ^= low;
        }
      }
    }
    *served = n;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return *served;
}
#endif

#ifdef SPLIT_LANES1
#define SPLIT_GROUPS1 (SPLIT_LOCAL1 / SPLIT_LANES1)
#define SPLIT_ROWS1 (SPLIT_GROUPS1 * SPLIT_RPG)

//   gate, up [E, I, H] split layout, gate_s, up_s their scales
//   fc1_factor [E, 2], fc1_input_scale [E] (W4A4 NVFP4), fc2_input_scale [E] (W4A4 NVFP4)
//   x [tokens, H] BF16 (the caller's); pairs: the chunk's T·k pairs
//   route_fused = 1: the routing is done here from the caller's topk_ids / topk_weights [tokens, k]
//     (expert_map [num_global]): the work-group (tile 0, pair p) writes pair_expert[p],
//     pair_weight[p] and records an invalid id in status; route_fused = 0: pair_expert is read
//     (the logit router wrote it)
//   x2 [pairs, I] fp32 (written)
//   status [4]: [2] += 1 for every pass over an expert's rows, [3] += the pairs it served
//
// Work-group (tile, p) serves pair p. With SPLIT_PAIRS > 1 (chunks of 2 or more tokens) it serves
// up to SPLIT_PAIRS pairs of the same expert in one pass over the tile's rows: the pairs of an
// expert in chunk order, in runs of SPLIT_PAIRS, each run served by the work-group of its first
// pair (the others return at once). Each pair's sums are the same operations in the same order
// either way: the output does not depend on which pairs share a pass.
__kernel __attribute__((reqd_work_group_size(SPLIT_LOCAL1, 1, 1))) void moe_split_fc1(
    __global const uint4* gate, __global const uint2* gate_s, __global const uint4* up, __global const uint2* up_s,
    __global const float* fc1_factor, __global const float* fc1_input_scale, __global const float* fc2_input_scale,
    int inter, int scale_exp, int top_k, int token_offset, __global const ushort* x, int pairs, int route_fused,
    __global const int* topk_ids, __global const float* topk_weights, int num_global, __global const int* expert_map,
    int num_local, __global int* pair_expert, __global float* pair_weight, __global float* x2, __global int* status,
    __global const float* fc1_bias) {
  __local float xl[SPLIT_PAIRS * SPLIT_HIDDEN];
  __local float part[SPLIT_ROWS1 * SPLIT_LANES1 * 2];
  __local float a_local[SPLIT_ROWS1];
  const int p = get_group_id(1), tile = get_group_id(0), lid = get_local_id(0);
  const long first_pair = (long)token_offset * top_k;  // the chunk's first pair in the caller's tensors
  int e;
  if (route_fused && tile == 0 && lid == 0) {
    e = moe_map_expert(topk_ids[first_pair + p], num_global, expert_map, num_local, first_pair + p, status);
    pair_expert[p] = e;
    pair_weight[p] = topk_weights[first_pair + p];
  } else {
    e = split_expert_of(p, route_fused, topk_ids, first_pair, num_global, expert_map, num_local, pair_expert);
  }
  if (e < 0) return;  // uniform over the work-group: no barrier is skipped by part of it

#if SPLIT_PAIRS > 1
  __local uint same[SPLIT_MAX_PAIRS / 32];
  __local int plist[SPLIT_PAIRS];
  __local int served;
  const int np = split_pass(p, e, pairs, route_fused, topk_ids, first_pair, num_global, expert_map, num_local,
                            pair_expert, same, plist, &served, lid, SPLIT_LOCAL1);
  if (np == 0) return;  // uniform: another work-group serves p
#define SPLIT_PAIR(j) plist[j]
#else
  const int np = 1;
#define SPLIT_PAIR(j) p
#endif
  if (tile == 0 && lid == 0) {
    atomic_add(&status[2], 1);
    atomic_add(&status[3], np);
  }

  // The tokens' activations, as the FC1 input (W4A4: quantized per block).
#if MOE_W4A4
#ifdef MOE_NVFP4
  const float gs1 = fc1_input_scale[e];
#else
  const float gs1 = 1.0f;
#endif
#endif
  for (int j = 0; j < np; ++j) {
    const __global ushort* xt = x + ((long)token_offset + SPLIT_PAIR(j) / top_k) * SPLIT_HIDDEN;
    __local float* xj = xl + j * SPLIT_HIDDEN;
#if MOE_W4A4
    for (int b = lid; b < SPLIT_HIDDEN / MOE_QUANT_BLOCK; b += SPLIT_LOCAL1) {
      float v[MOE_QUANT_BLOCK];
      for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = bf16_to_float(xt[b * MOE_QUANT_BLOCK + i]);
      moe_quantize_block_local(v, gs1, xj + b * MOE_QUANT_BLOCK);
    }
#else
    for (int i = lid; i < SPLIT_HIDDEN; i += SPLIT_LOCAL1) xj[i] = bf16_to_float(xt[i]);
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  const int lane = lid % SPLIT_LANES1, g = lid / SPLIT_LANES1;
  const int row0 = tile * SPLIT_ROWS1;
  const int steps = SPLIT_HIDDEN / SPLIT_STEP1;
  const long row_words = SPLIT_HIDDEN / 32, row_scales = (long)steps * SPLIT_GROUPS(SPLIT_LANES1);
  const int sgroup = 4 * SPLIT_LANES1 >= MOE_BLOCK ? 4 * lane / MOE_BLOCK : 0;
  float accg[SPLIT_RPG][SPLIT_PAIRS], accu[SPLIT_RPG][SPLIT_PAIRS];
  long row_of[SPLIT_RPG];
#pragma unroll
  for (int r = 0; r < SPLIT_RPG; ++r) {
    const int i = min(row0 + r * SPLIT_GROUPS1 + g, inter - 1);  // rows past I repeat the last one
    row_of[r] = (long)e * inter + i;
#pragma unroll
    for (int j = 0; j < SPLIT_PAIRS; ++j) {
      accg[r][j] = 0.0f;
      accu[r][j] = 0.0f;
    }
  }
  const __local float* xs[SPLIT_PAIRS];  // pair j's activations for this lane
#pragma unroll
  for (int j = 0; j < SPLIT_PAIRS; ++j) xs[j] = xl + min(j, np - 1) * SPLIT_HIDDEN + 4 * lane;
  for (int st = 0; st < steps; ++st) {
    // This step's activations of each pair, read from local memory once for all SPLIT_RPG rows.
    float4 xr[SPLIT_PAIRS][8];
#pragma unroll
    for (int j = 0; j < SPLIT_PAIRS; ++j) {
#pragma unroll
      for (int q = 0; q < 8; ++q) xr[j][q] = vload4(0, xs[j] + st * SPLIT_STEP1 + q * 4 * SPLIT_LANES1);
    }
#pragma unroll
    for (int r = 0; r < SPLIT_RPG; ++r) {
      const long wi = row_of[r] * row_words + lane + st * SPLIT_LANES1;
      const long si = row_of[r] * row_scales + sgroup + st * SPLIT_GROUPS(SPLIT_LANES1);
      const uint4 wgate = gate[wi], wup = up[wi];
      const uint2 bg = gate_s[si], bu = up_s[si];
      float sgate[8], sup[8];
      split_scales(bg, scale_exp, sgate);
      split_scales(bu, scale_exp, sup);
      split_dot_pairs_regs(wgate, sgate, xr, accg[r]);
      split_dot_pairs_regs(wup, sup, xr, accu[r]);
    }
  }
#if MOE_W4A4
#ifdef MOE_NVFP4
  const float gs2 = fc2_input_scale[e];
#else
  const float gs2 = 1.0f;
#endif
#else
  (void)a_local;
  (void)fc2_input_scale;
  (void)fc1_input_scale;
#endif
  const float2 f = vload2(e, fc1_factor);
#pragma unroll
  for (int j = 0; j < SPLIT_PAIRS; ++j) {
    if (j < np) {  // uniform
      const long out_row = (long)SPLIT_PAIR(j) * inter + row0;
#pragma unroll
      for (int r = 0; r < SPLIT_RPG; ++r) {
        const int local_row = r * SPLIT_GROUPS1 + g;
        part[(local_row * SPLIT_LANES1 + lane) * 2] = accg[r][j];
        part[(local_row * SPLIT_LANES1 + lane) * 2 + 1] = accu[r][j];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      // One work-item per row sums its lanes in lane order.
      // One work-item per row sums its lanes in lane order (a work-group may cover more rows
      // than it has work-items: few lanes per row and several rows per lane group).
      for (int row = lid; row < SPLIT_ROWS1; row += SPLIT_LOCAL1) {
        float hg = 0.0f, hu = 0.0f;
        for (int l = 0; l < SPLIT_LANES1; ++l) {
          hg += part[(row * SPLIT_LANES1 + l) * 2];
          hu += part[(row * SPLIT_LANES1 + l) * 2 + 1];
        }
        const float a = moe_fc1_act(hg, hu, f, fc1_bias, e, inter, min(row0 + row, inter - 1));
#if MOE_W4A4
        a_local[row] = a;
#else
        if (row0 + row < inter) x2[out_row + row] = a;
#endif
      }
      barrier(CLK_LOCAL_MEM_FENCE);
#if MOE_W4A4
      for (int b = lid; b < SPLIT_ROWS1 / MOE_QUANT_BLOCK; b += SPLIT_LOCAL1) {
        if (row0 + b * MOE_QUANT_BLOCK < inter) {
          float v[MOE_QUANT_BLOCK];
          for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = a_local[b * MOE_QUANT_BLOCK + i];
          moe_quantize_block(v, gs2, x2 + out_row + b * MOE_QUANT_BLOCK);
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // a_local and part are written again for the next pair
#endif
    }
  }
#undef SPLIT_PAIR
}

#endif  // SPLIT_LANES1

#ifdef SPLIT_LANES2
#define SPLIT_LOCAL2 (SPLIT_LANES2 * SPLIT_SLOTS * SPLIT_ROWS2)

//   w2 [E, H, I] split layout, w2_s its scales, fc2_factor [E]
//   x2 [pairs, I] (moe_split_fc1), pair_expert, pair_weight [pairs]
//   out [tokens, H] BF16 or fp32 (the caller's), token t of the chunk at token_offset + t
__kernel __attribute__((reqd_work_group_size(SPLIT_LOCAL2, 1, 1))) void moe_split_fc2(
    __global const uint4* w2, __global const uint2* w2_s, __global const float* fc2_factor, int hidden, int inter,
    int scale_exp, __global const float* x2, __global const int* pair_expert, __global const float* pair_weight,
    int top_k, int token_offset, __global void* out, __global const float* fc2_bias) {
  __local float part[SPLIT_ROWS2 * SPLIT_SLOTS * SPLIT_LANES2];
  __local float dots[SPLIT_ROWS2 * SPLIT_SLOTS];
  const int t = get_group_id(1), lid = get_local_id(0);
  const int lane = lid % SPLIT_LANES2, rg = (lid / SPLIT_LANES2) % SPLIT_ROWS2, sl = lid / (SPLIT_LANES2 * SPLIT_ROWS2);
  const int n = min((int)get_group_id(0) * SPLIT_ROWS2 + rg, hidden - 1);  // rows past H repeat the last one
  const int steps = inter / SPLIT_STEP2;
  const long row_words = inter / 32, row_scales = (long)steps * SPLIT_GROUPS(SPLIT_LANES2);
  const int sgroup = 4 * SPLIT_LANES2 >= MOE_BLOCK ? 4 * lane / MOE_BLOCK : 0;
  float result = 0.0f;  // the weighted sum of this work-item's (row, slot lane), used when SPLIT_SLOTS < k
  for (int s0 = 0; s0 < top_k; s0 += SPLIT_SLOTS) {
    const int s = s0 + sl, p = t * top_k + s;
    const int e = s < top_k ? pair_expert[p] : -1;
    float acc = 0.0f;
    if (e >= 0) {
      const long row = (long)e * hidden + n;
      const __global uint4* w = w2 + row * row_words + lane;
      const __global uint2* sc = w2_s + row * row_scales + sgroup;
      const __global float* xs = x2 + (long)p * inter + 4 * lane;
      for (int st = 0; st < steps; ++st) {
        float sv[8];
        split_scales(sc[st * SPLIT_GROUPS(SPLIT_LANES2)], scale_exp, sv);
        acc += split_dot_step_global(w[st * SPLIT_LANES2], sv, xs + st * SPLIT_STEP2, 4 * SPLIT_LANES2);
      }
    }
    part[(sl * SPLIT_ROWS2 + rg) * SPLIT_LANES2 + lane] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    // Lanes summed in order, then slots in order (each slot's dot × its factor and weight).
    if (lid < SPLIT_ROWS2 * SPLIT_SLOTS) {
      const int r = lid % SPLIT_ROWS2, ls = lid / SPLIT_ROWS2, ss = s0 + ls, pp = t * top_k + ss;
      float d = 0.0f;
      for (int l = 0; l < SPLIT_LANES2; ++l) d += part[(ls * SPLIT_ROWS2 + r) * SPLIT_LANES2 + l];
      const int ee = ss < top_k ? pair_expert[pp] : -1;
      const int nr = min((int)get_group_id(0) * SPLIT_ROWS2 + r, hidden - 1);
      dots[ls * SPLIT_ROWS2 + r] = ee >= 0 ? pair_weight[pp] * moe_fc2_out(d, fc2_factor[ee], fc2_bias, ee, hidden, nr) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < SPLIT_ROWS2) {
      for (int ls = 0; ls < SPLIT_SLOTS && s0 + ls < top_k; ++ls) {
        const int ee = pair_expert[t * top_k + s0 + ls];
        if (ee >= 0) result += dots[ls * SPLIT_ROWS2 + lid];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const int row = get_group_id(0) * SPLIT_ROWS2 + lid;
  if (lid < SPLIT_ROWS2 && row < hidden) moe_store_out(result, out, ((long)token_offset + t) * hidden + row);
}

#endif  // SPLIT_LANES2
