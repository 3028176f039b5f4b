// MoE FC2 and the top-k reduction. Each work-item owns MOE_VEC consecutive output rows n.
//
//   moe_fc2         (grouped) one tile per work-group row: streams the rows of the tile's
//                   expert once for its up to MOE_TILE_M pairs and writes y[pair, n] (fp32).
//   moe_reduce      out[t, n] = Σ_s w[t,s] · y[t·k+s, n], s = 0..k-1 in order, local pairs only.
//   moe_fc2_reduce  (decode) both at once: one (rows, token) per work-item, slot by slot in order.
// The sum always runs in slot order from 0.0f, with no atomics: bit-identical run to run.
//
// Build-time parameters: MOE_TILE_M, MOE_LOCAL (work-group size), MOE_OUT_BF16, and those of
// moe_fp4_vec.cl. (W4A4 and W4A16 differ only in what x2 holds.)
//   w2 [E, groups(H), I/8, MOE_GROUP] words, w2_s [E, groups(H), I/block, MOE_GROUP] block scales
//   x2 [slots, I]  FC2 inputs (moe_fc1)
//   x2q [slots, I/2]  the same as BF16 pairs (moe_fc1; read by the BF16 dot products, MOE_BF16DOT)
// MOE_X2_FP4: x2 holds NVFP4 W4A4's quantized values (never tiny: no scan before the BF16 dot products).
//   fc2_factor [E] alpha = FC2 input scale (gs_d) × dequant global scale × 2^-(scale_exp + MOE_E2M1_EXP)
#ifdef MOE_X2_FP4
#define MOE_BF16_X_TINY 0
#endif
#include "moe_fp4_vec.cl"

// Independent accumulator chains per token: with few tokens, elements alternate between
// MOE_CHAINS(n) partial sums so that about four FMA chains hide the FMA latency.
#define MOE_CHAINS(n) ((n) >= 4 ? 1 : 4 / (n))
// MOE_BATCH_INVARIANT: the chains of a full tile for every tile (see moe_fc1.cl).
#ifdef MOE_BATCH_INVARIANT
#define MOE_FC2_CHAINS(n) MOE_CHAINS(MOE_TILE_M)
#else
#define MOE_FC2_CHAINS(n) MOE_CHAINS(n)
#endif

#if MOE_SCALEDX
MOE_SX_DOT_N(moe_sx_fc2_1, 1)
MOE_SX_DOT_N(moe_sx_fc2_2, 2)
MOE_SX_DOT_N(moe_sx_fc2_4, 4)
#endif

#if MOE_INTDOT
MOE_INT_DOT_N(moe_int_fc2_1, 1)
MOE_INT_DOT_N(moe_int_fc2_2, 2)
MOE_INT_DOT_N(moe_int_fc2_4, 4)
#endif

#if MOE_BF16DOT
MOE_BF16_DOT_N(moe_bf16_fc2_1, 1)
MOE_BF16_DOT_N(moe_bf16_fc2_2, 2)
MOE_BF16_DOT_N(moe_bf16_fc2_4, 4)
MOE_BF16_DOT_N(moe_bf16_fc2_8, 8)
#endif

// Dot products of the work-item's rows with the first `n` FC2 input rows from `start` (a
// constant n at each call site; rows past `count` repeat the last one).
static __attribute__((always_inline)) inline void moe_fc2_dot(const __global uint* w, const __global moe_scale_t* s, int inter,
                                                       int scale_exp, const __global float* x2,
                                                       const __global uint* x2q, int start, int count, const int n,
                                                       floatV* h) {
#if MOE_BF16DOT
  // Few pairs: BF16 dot products (moe_fp4_vec.cl, MOE_BF16DOT), unless an activation is too
  // small for them (then the table decode below).
  // Tiles of 8 (5 to 8 pairs) in one pass: 3 accumulators a pair fit the registers for one matrix.
  if (n <= MOE_BF16_MAX_PAIRS || n == 2 * MOE_BF16_MAX_PAIRS) {
    const __global uint* x = x2q + (long)start * (inter / 2);
    int tiny;
    if (n == 1) tiny = moe_bf16_fc2_1(w, s, inter, scale_exp, x, count, h);
    else if (n == 2) tiny = moe_bf16_fc2_2(w, s, inter, scale_exp, x, count, h);
    else if (n <= MOE_BF16_MAX_PAIRS) tiny = moe_bf16_fc2_4(w, s, inter, scale_exp, x, count, h);
    else tiny = moe_bf16_fc2_8(w, s, inter, scale_exp, x, count, h);
    if (!tiny) return;
  }
#elif MOE_SCALEDX
  // Few pairs, NVFP4 W4A16 on 8-lane CPU vectors: scaled activations (moe_fp4_vec.cl, MOE_SCALEDX).
  if (n <= MOE_SX_MAX_PAIRS) {
    const __global uint* x = (const __global uint*)((const __global float*)x2q + (long)start * MOE_SX_ROW(inter));
    if (n == 1) moe_sx_fc2_1(w, s, inter, scale_exp, x, count, h);
    else if (n == 2) moe_sx_fc2_2(w, s, inter, scale_exp, x, count, h);
    else moe_sx_fc2_4(w, s, inter, scale_exp, x, count, h);
    return;
  }
#elif MOE_INTDOT
  // Few pairs on 8-lane CPU vectors: integer block sums (moe_int_dot.cl, MOE_INTDOT; W4A4 exact).
  if (n <= MOE_INT_MAX_PAIRS) {
    const __global uint* x = x2q + (long)start * MOE_INT_ROW2(inter);
    if (n == 1) moe_int_fc2_1(w, s, inter, scale_exp, x, count, h);
    else if (n == 2) moe_int_fc2_2(w, s, inter, scale_exp, x, count, h);
    else moe_int_fc2_4(w, s, inter, scale_exp, x, count, h);
    return;
  }
#else
  (void)x2q;
#endif
#if MOE_LUT
  // Few pairs on 16-lane CPU vectors: table decode, unscaled block sums (moe_fp4_vec.cl, MOE_LUT),
  // 4 / n chains per pair.
  if (n <= MOE_LUT_MAX_PAIRS) {
    const int bc = MOE_LUT_MAX_PAIRS / n;
    const float16 table = MOE_LUT_TABLE;
    const __global float* xl[MOE_LUT_MAX_PAIRS];
    float16 t[MOE_LUT_MAX_PAIRS];
#pragma unroll
    for (int m = 0; m < n; ++m) {
      xl[m] = x2 + (long)(start + min(m, count - 1)) * inter;
      t[m] = (float16)(0.0f);
    }
    for (int b = 0; b < inter / MOE_BLOCK; ++b) {
      float16 bs[MOE_LUT_MAX_PAIRS];
#pragma unroll
      for (int i = 0; i < MOE_LUT_MAX_PAIRS; ++i) bs[i] = (float16)(0.0f);
#pragma unroll
      for (int q = 0; q < MOE_BLOCK / 8; ++q) {
        const int g = b * (MOE_BLOCK / 8) + q;
        const uint16 word = vload16(0, w + (long)g * MOE_GROUP);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float16 d = moe_lut_e2m1(table, word, j);
#pragma unroll
          for (int m = 0; m < n; ++m) {
            const int c = m * bc + (8 * q + j) % bc;
            bs[c] = fma(d, (float16)(xl[m][8 * g + j]), bs[c]);
          }
        }
      }
      const float16 sv = moe_lut_block_scales(s + b * MOE_GROUP, scale_exp);
#pragma unroll
      for (int m = 0; m < n; ++m) {
        float16 sum = bs[m * bc];
#pragma unroll
        for (int c = 1; c < bc; ++c) sum += bs[m * bc + c];
        t[m] = fma(sum, sv, t[m]);
      }
    }
#pragma unroll
    for (int m = 0; m < n; ++m) h[m] = t[m];
    return;
  }
#endif
  const int chains = MOE_FC2_CHAINS(n);
  const __global float* xr[MOE_TILE_M];
  floatV acc[4 * MOE_TILE_M];
  #pragma unroll
  for (int m = 0; m < n; ++m) xr[m] = x2 + (long)(start + min(m, count - 1)) * inter;
  #pragma unroll
  for (int i = 0; i < n * chains; ++i) acc[i] = (floatV)(0.0f);
  for (int b = 0; b < inter / MOE_BLOCK; ++b) {
    const floatV sv = moe_block_scales(s + b * MOE_GROUP, scale_exp);
    for (int q = 0; q < MOE_BLOCK / 8; ++q) {
      const int g = b * (MOE_BLOCK / 8) + q;
      const uintV word = moe_loadV(w + (long)g * MOE_GROUP);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const floatV d = moe_e2m1(word, j) * sv;
        #pragma unroll
        for (int m = 0; m < n; ++m) {
          const int c = m * chains + j % chains;
          acc[c] = fma(d, (floatV)(xr[m][8 * g + j]), acc[c]);
        }
      }
    }
  }
  #pragma unroll
  for (int m = 0; m < n; ++m) {
    h[m] = acc[m * chains];
    #pragma unroll
    for (int c = 1; c < chains; ++c) h[m] += acc[m * chains + c];
  }
}

// The layout offsets of row n of expert e (in words and in block scales).
inline long moe_fc2_words(int e, int n, int hidden, int inter) {
  return ((long)e * ((hidden + MOE_GROUP - 1) / MOE_GROUP) + n / MOE_GROUP) * (inter / 8) * MOE_GROUP + n % MOE_GROUP;
}
inline long moe_fc2_scales(int e, int n, int hidden, int inter) {
  return ((long)e * ((hidden + MOE_GROUP - 1) / MOE_GROUP) + n / MOE_GROUP) * (inter / MOE_BLOCK) * MOE_GROUP +
         n % MOE_GROUP;
}

#if MOE_PANEL
// A run's FC2 (moe_fp4_vec.cl, "Prefill panels"): y[pair, rows] for its `count` pairs from `start`.
inline void moe_fc2_panel(const __global uint* w, const __global moe_scale_t* s, int inter, int scale_exp,
                          const __global float* x2, int start, int count, float f, __global const int* slot_pair,
                          int hidden, int n0, __global float* y, __local float* panel, __global const float* fc2_bias,
                          int e) {
  floatV acc[MOE_PANEL_TILES * MOE_TILE_M];
  for (int i = 0; i < MOE_PANEL_TILES * MOE_TILE_M; ++i) acc[i] = (floatV)(0.0f);
  for (int k0 = 0; k0 < inter; k0 += MOE_PANEL_K) {
    const int kn = min(MOE_PANEL_K, inter - k0);
    moe_panel_decode(w, s, scale_exp, k0, kn, panel);
    for (int m0 = 0; m0 < count; m0 += MOE_TILE_M) {
      const __global float* xr[MOE_TILE_M];
      floatV a[MOE_TILE_M];
#pragma unroll
      for (int m = 0; m < MOE_TILE_M; ++m) {
        xr[m] = x2 + (long)(start + min(m0 + m, count - 1)) * inter + k0;
        a[m] = acc[m0 + m];
      }
      for (int k = 0; k < kn; ++k) {
        const floatV d = moe_loadV(panel + k * MOE_VEC);
#pragma unroll
        for (int m = 0; m < MOE_TILE_M; ++m) a[m] = fma(d, (floatV)(xr[m][k]), a[m]);
      }
#pragma unroll
      for (int m = 0; m < MOE_TILE_M; ++m) acc[m0 + m] = a[m];
    }
  }
  for (int m = 0; m < count; ++m)
    moe_storeV(moe_fc2_out(acc[m], f, fc2_bias, e, hidden, n0), y + (long)slot_pair[start + m] * hidden + n0);
}
#endif

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL, 1, 1))) void moe_fc2(
    __global const uint* w2, __global const moe_scale_t* w2_s, __global const float* fc2_factor, int hidden, int inter,
    int scale_exp, __global const float* x2, __global const int* tiles, __global const int* chunk_info,
    __global const int* slot_pair, __global float* y, __global const uint* x2q, __global const float* fc2_bias) {
  const int n0 = get_global_id(0) * MOE_VEC, tile = get_group_id(1);
  if (n0 >= hidden || tile >= chunk_info[0]) return;
  const int e = tiles[3 * tile], start = tiles[3 * tile + 1];
  int count = tiles[3 * tile + 2];
  const __global uint* w = w2 + moe_fc2_words(e, n0, hidden, inter);
  const __global moe_scale_t* s = w2_s + moe_fc2_scales(e, n0, hidden, inter);
#if MOE_PANEL
  __local float panel[MOE_LOCAL * MOE_PANEL_K * MOE_VEC];
  const int run = moe_panel_run(tiles, chunk_info[0], tile, &count);
  if (run == 0) return;
  if (run > 1) {
    moe_fc2_panel(w, s, inter, scale_exp, x2, start, count, fc2_factor[e], slot_pair, hidden, n0, y,
                  panel + get_local_id(0) * MOE_PANEL_K * MOE_VEC, fc2_bias, e);
    return;
  }
#endif
  floatV h[MOE_TILE_M];
  if (count == 1) moe_fc2_dot(w, s, inter, scale_exp, x2, x2q, start, count, 1, h);
#if MOE_TILE_M >= 4
  else if (count <= 2) moe_fc2_dot(w, s, inter, scale_exp, x2, x2q, start, count, 2, h);
#endif
#if MOE_TILE_M >= 8
  else if (count <= 4) moe_fc2_dot(w, s, inter, scale_exp, x2, x2q, start, count, 4, h);
#endif
  else moe_fc2_dot(w, s, inter, scale_exp, x2, x2q, start, count, MOE_TILE_M, h);
  const float f = fc2_factor[e];
  for (int m = 0; m < MOE_TILE_M && m < count; ++m)
    moe_storeV(moe_fc2_out(h[m], f, fc2_bias, e, hidden, n0), y + (long)slot_pair[start + m] * hidden + n0);
}

__kernel void moe_reduce(__global const float* y, __global const int* pair_expert, __global const float* pair_weight,
                         int top_k, int hidden, int num_tokens, int token_offset, __global void* out) {
  const int n0 = get_global_id(0) * MOE_VEC, t = get_global_id(1);
  if (n0 >= hidden || t >= num_tokens) return;
  floatV o = (floatV)(0.0f);
  for (int s = 0; s < top_k; ++s) {
    const int p = t * top_k + s;
    if (pair_expert[p] >= 0) o += pair_weight[p] * moe_loadV(y + (long)p * hidden + n0);
  }
  moe_store_out(o, out, ((long)token_offset + t) * hidden + n0);
}

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL, 1, 1))) void moe_fc2_reduce(
    __global const uint* w2, __global const moe_scale_t* w2_s, __global const float* fc2_factor, int hidden, int inter,
    int scale_exp, __global const float* x2, __global const int* pair_expert, __global const int* pair_slot,
    __global const float* pair_weight, int top_k, int num_tokens, int token_offset, __global void* out,
    __global const uint* x2q, __global const float* fc2_bias) {
  const int n0 = get_global_id(0) * MOE_VEC, t = get_global_id(1);
  if (n0 >= hidden || t >= num_tokens) return;
  floatV o = (floatV)(0.0f);
  for (int s = 0; s < top_k; ++s) {
    const int p = t * top_k + s, e = pair_expert[p];
    if (e < 0) continue;
    floatV h[MOE_TILE_M];
    moe_fc2_dot(w2 + moe_fc2_words(e, n0, hidden, inter), w2_s + moe_fc2_scales(e, n0, hidden, inter), inter,
                scale_exp, x2, x2q, pair_slot[p], 1, 1, h);
    o += pair_weight[p] * moe_fc2_out(h[0], fc2_factor[e], fc2_bias, e, hidden, n0);
  }
  moe_store_out(o, out, ((long)token_offset + t) * hidden + n0);
}
