// MoE FC1 + SwiGLU (+ W4A4: the FC2 input's block quantization). One tile of up to MOE_TILE_M
// pairs of one expert per work-group row; each work-item owns MOE_VEC consecutive intermediate
// rows r: it streams gate rows r.. and up rows r.. of the expert once, against the tile's
// activations, and writes a = bf16(silu(g) × up) for each pair of the tile.
//
// Build-time parameters: MOE_TILE_M, MOE_LOCAL (work-group size; MOE_LOCAL·MOE_VEC is a multiple
// of the block under W4A4), MOE_W4A4, and those of moe_fp4_vec.cl.
//
//   gate_w, up_w [E, groups(I), H/8, MOE_GROUP] words and gate_s, up_s [E, groups(I), H/block,
//                   MOE_GROUP] block scales (moe_fp4_vec.cl), groups(n) = ceil(n / MOE_GROUP)
//   x1 [slots, H]   FC1 inputs (moe_gather)
//   x2 [slots, I]   FC2 inputs, written here: BF16 values (W4A16) or e2m1 × block scale of their
//                   quantization (W4A4)
//   x1q [slots, H/2], x2q [slots, I/2]  the same as BF16 pairs for the BF16 dot products
//                   (MOE_BF16DOT; moe_bf16_quads16): x1q from moe_gather, x2q written here
//   fc1_factor [E, 2]  per expert {gate, up}: alpha = input scale (gs_d, W4A4) × dequant global
//                   scale × 2^-(scale_exp + MOE_E2M1_EXP), so gate and up keep their own scales
//   fc2_input_scale [E]  W4A4 NVFP4: quant-direction global scale of the FC2 input
// NVFP4 W4A4's FC1 inputs are never tiny (e2m1 × E4M3: at least 2^-10 when nonzero): no scan for
// them before the BF16 dot products (moe_fp4_vec.cl). MXFP4's E8M0 scales reach 2^-127: scanned.
#if MOE_W4A4 && defined(MOE_NVFP4)
#define MOE_BF16_X_TINY 0
#endif
#include "moe_fp4_vec.cl"
#include "moe_quant.cl"

// Independent accumulator chains per token: with a single token, elements alternate between
// two partial sums of each row, so that four FMA chains (gate, up) hide the FMA latency while
// the accumulators, scales and words still fit in 16 AVX2 registers.
#define MOE_CHAINS(n) ((n) == 1 ? 2 : 1)
// MOE_BATCH_INVARIANT (MoeConfig::batch_invariant): every tile uses the chains of a full tile, so
// a pair's sums run in one order whatever the number of pairs its tile holds, and its bits do not
// depend on the rest of the batch. Otherwise a tile of one pair gets more chains (faster).
#ifdef MOE_BATCH_INVARIANT
#define MOE_FC1_CHAINS(n) MOE_CHAINS(MOE_TILE_M)
#else
#define MOE_FC1_CHAINS(n) MOE_CHAINS(n)
#endif

#if MOE_SCALEDX
MOE_SX_DOT2_N(moe_sx_fc1_1, 1)
MOE_SX_DOT2_N(moe_sx_fc1_2, 2)
MOE_SX_DOT2_N(moe_sx_fc1_4, 4)
#endif

#if MOE_INTDOT
MOE_INT_DOT2_N(moe_int_fc1_1, 1)
MOE_INT_DOT2_N(moe_int_fc1_2, 2)
MOE_INT_DOT2_N(moe_int_fc1_4, 4)
#endif

#if MOE_BF16DOT
MOE_BF16_DOT2_N(moe_bf16_fc1_1, 1)
MOE_BF16_DOT2_N(moe_bf16_fc1_2, 2)
MOE_BF16_DOT2_N(moe_bf16_fc1_4, 4)
#endif

// Gate and up dot products of the work-item's rows for the first `n` pairs of a tile. Each call
// site passes a constant n, so the loops unroll and the accumulators stay in registers; pairs
// past `count` repeat the last one.
static __attribute__((always_inline)) inline void moe_fc1_dot(const __global uint* gw, const __global moe_scale_t* gs,
                                                       const __global uint* uw, const __global moe_scale_t* us, int hidden,
                                                       int scale_exp, const __global float* x1,
                                                       const __global uint* x1q, int start, int count, const int n,
                                                       floatV* hg, floatV* hu) {
#if MOE_BF16DOT
  // Few pairs: BF16 dot products (moe_fp4_vec.cl, MOE_BF16DOT), unless an activation is too
  // small for them (then the table decode below).
  // Tiles of 8 (5 to 8 pairs): two passes of 4 pairs over the work-item's rows, the second with
  // its 40 KB of weights (gate and up of 16 rows at H = 2048) still in L2; 4 accumulators a pair
  // and matrix in one pass would not fit the 32 vector registers.
  if (n <= MOE_BF16_MAX_PAIRS || n == 2 * MOE_BF16_MAX_PAIRS) {
    const __global uint* x = x1q + (long)start * (hidden / 2);
    int tiny;
    if (n == 1) tiny = moe_bf16_fc1_1(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else if (n == 2) tiny = moe_bf16_fc1_2(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else if (n <= MOE_BF16_MAX_PAIRS) tiny = moe_bf16_fc1_4(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else {
      tiny = moe_bf16_fc1_4(gw, gs, uw, us, hidden, scale_exp, x, min(count, 4), hg, hu);
      if (count > 4)
        tiny |= moe_bf16_fc1_4(gw, gs, uw, us, hidden, scale_exp, x + 4L * (hidden / 2), count - 4, hg + 4, hu + 4);
      else
        for (int m = 4; m < 8; ++m) hg[m] = hg[3], hu[m] = hu[3];  // pairs past count repeat the last
    }
    if (!tiny) return;
  }
#elif MOE_SCALEDX
  // Few pairs, NVFP4 W4A16 on 8-lane CPU vectors: scaled activations (moe_fp4_vec.cl, MOE_SCALEDX).
  if (n <= MOE_SX_MAX_PAIRS) {
    const __global uint* x = (const __global uint*)((const __global float*)x1q + (long)start * MOE_SX_ROW(hidden));
    if (n == 1) moe_sx_fc1_1(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else if (n == 2) moe_sx_fc1_2(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else moe_sx_fc1_4(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    return;
  }
#elif MOE_INTDOT
  // Few pairs on 8-lane CPU vectors: integer block sums (moe_int_dot.cl, MOE_INTDOT; W4A4 exact).
  if (n <= MOE_INT_MAX_PAIRS) {
    const __global uint* x = x1q + (long)start * MOE_INT_ROW1(hidden);
    if (n == 1) moe_int_fc1_1(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else if (n == 2) moe_int_fc1_2(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    else moe_int_fc1_4(gw, gs, uw, us, hidden, scale_exp, x, count, hg, hu);
    return;
  }
#else
  (void)x1q;
#endif
#if MOE_LUT
  // Few pairs on 16-lane CPU vectors: table decode, unscaled block sums (moe_fp4_vec.cl, MOE_LUT),
  // 4 / n chains per pair and matrix.
  if (n <= MOE_LUT_MAX_PAIRS) {
    const int bc = MOE_LUT_MAX_PAIRS / n;
    const float16 table = MOE_LUT_TABLE;
    const __global float* xl[MOE_LUT_MAX_PAIRS];
    float16 tg[MOE_LUT_MAX_PAIRS], tu[MOE_LUT_MAX_PAIRS];
#pragma unroll
    for (int m = 0; m < n; ++m) {
      xl[m] = x1 + (long)(start + min(m, count - 1)) * hidden;
      tg[m] = tu[m] = (float16)(0.0f);
    }
    for (int b = 0; b < hidden / MOE_BLOCK; ++b) {
      float16 bg[MOE_LUT_MAX_PAIRS], bu[MOE_LUT_MAX_PAIRS];
#pragma unroll
      for (int i = 0; i < MOE_LUT_MAX_PAIRS; ++i) bg[i] = bu[i] = (float16)(0.0f);
#pragma unroll
      for (int q = 0; q < MOE_BLOCK / 8; ++q) {
        const int g = b * (MOE_BLOCK / 8) + q;
        const uint16 wg = vload16(0, gw + (long)g * MOE_GROUP), wu = vload16(0, uw + (long)g * MOE_GROUP);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float16 dg = moe_lut_e2m1(table, wg, j), du = moe_lut_e2m1(table, wu, j);
#pragma unroll
          for (int m = 0; m < n; ++m) {
            const float16 xv = (float16)(xl[m][8 * g + j]);
            const int c = m * bc + (8 * q + j) % bc;
            bg[c] = fma(dg, xv, bg[c]);
            bu[c] = fma(du, xv, bu[c]);
          }
        }
      }
      const float16 sg = moe_lut_block_scales(gs + b * MOE_GROUP, scale_exp);
      const float16 su = moe_lut_block_scales(us + b * MOE_GROUP, scale_exp);
#pragma unroll
      for (int m = 0; m < n; ++m) {
        float16 sumg = bg[m * bc], sumu = bu[m * bc];
#pragma unroll
        for (int c = 1; c < bc; ++c) {
          sumg += bg[m * bc + c];
          sumu += bu[m * bc + c];
        }
        tg[m] = fma(sumg, sg, tg[m]);
        tu[m] = fma(sumu, su, tu[m]);
      }
    }
#pragma unroll
    for (int m = 0; m < n; ++m) {
      hg[m] = tg[m];
      hu[m] = tu[m];
    }
    return;
  }
#endif
  const int chains = MOE_FC1_CHAINS(n);
  const __global float* xr[MOE_TILE_M];
  floatV ag[2 * MOE_TILE_M], au[2 * MOE_TILE_M];
  #pragma unroll
  for (int m = 0; m < n; ++m) xr[m] = x1 + (long)(start + min(m, count - 1)) * hidden;
  #pragma unroll
  for (int i = 0; i < n * chains; ++i) {
    ag[i] = (floatV)(0.0f);
    au[i] = (floatV)(0.0f);
  }
  for (int b = 0; b < hidden / MOE_BLOCK; ++b) {
    const floatV sg = moe_block_scales(gs + b * MOE_GROUP, scale_exp);
    const floatV su = moe_block_scales(us + b * MOE_GROUP, scale_exp);
    for (int q = 0; q < MOE_BLOCK / 8; ++q) {
      const int g = b * (MOE_BLOCK / 8) + q;
      const uintV wg = moe_loadV(gw + (long)g * MOE_GROUP), wu = moe_loadV(uw + (long)g * MOE_GROUP);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const floatV dg = moe_e2m1(wg, j) * sg, du = moe_e2m1(wu, j) * su;
        #pragma unroll
        for (int m = 0; m < n; ++m) {
          const floatV xv = (floatV)(xr[m][8 * g + j]);
          const int c = m * chains + j % chains;
          ag[c] = fma(dg, xv, ag[c]);
          au[c] = fma(du, xv, au[c]);
        }
      }
    }
  }
  #pragma unroll
  for (int m = 0; m < n; ++m) {
    hg[m] = ag[m * chains];
    hu[m] = au[m * chains];
    #pragma unroll
    for (int c = 1; c < chains; ++c) {
      hg[m] += ag[m * chains + c];
      hu[m] += au[m * chains + c];
    }
  }
}

#if MOE_W4A4
// Quantizes each block of the work-group's a values of the first `count` pairs of a tile from
// slot `start` (a_local: pair m's rows at (m · MOE_LOCAL + lid) · MOE_VEC; moe_quant.cl). Called
// by every work-item of the group, between barriers.
inline void moe_fc1_quantize_tile(__local const float* a_local, int e, int start, int count, int inter,
                                  __global const float* fc2_input_scale, __global float* x2, __global uint* x2q) {
  const int lid = get_local_id(0);
  const int rows = MOE_LOCAL * MOE_VEC, blocks = rows / MOE_BLOCK, r0 = get_group_id(0) * rows;
#ifdef MOE_NVFP4
  const float gs = count > 0 ? fc2_input_scale[e] : 1.0f;
#else
  const float gs = 1.0f;
#endif
  for (int job = lid; job < MOE_TILE_M * blocks; job += MOE_LOCAL) {
    const int m = job / blocks, rb = r0 + (job % blocks) * MOE_BLOCK;
    if (m < count && rb < inter) {
#if defined(MOE_NVFP4) || MOE_INTDOT
      // The block as float16 lanes (NVFP4 one, MXFP4 two under one scale: moe_quantize_block's
      // values), stored as fp32 and as FC2's integer form (moe_quant.cl) or, for the BF16 dot
      // products, as BF16 pairs.
      const __local float* a = a_local + m * rows + (job % blocks) * MOE_BLOCK;
      float16 v[MOE_BLOCK / 16], q[MOE_BLOCK / 16];
      for (int c = 0; c < MOE_BLOCK / 16; ++c) v[c] = vload16(c, a);
      float sq;
      moe_quantize_block16s_e2m1(v, gs, q, &sq);
      for (int c = 0; c < MOE_BLOCK / 16; ++c) {
        const float16 qv = q[c] * sq;
        vstore16(qv, c, x2 + (long)(start + m) * inter + rb);
#if MOE_INTDOT
        moe_int_store_codes16(q[c], sq, x2q + (long)(start + m) * (inter / 2), inter, rb / 16 + c);
#elif MOE_BF16DOT
        vstore8(moe_bf16_quads16(as_uint16(qv)), 0, x2q + (long)(start + m) * (inter / 2) + rb / 2 + 8 * c);
#else
        (void)x2q;
#endif
      }
#else
      float v[MOE_BLOCK];
      for (int i = 0; i < MOE_BLOCK; ++i) v[i] = a_local[m * rows + (job % blocks) * MOE_BLOCK + i];
      __global float* dst = x2 + (long)(start + m) * inter + rb;
      moe_quantize_block(v, gs, dst);
#if MOE_BF16DOT
      // The block as BF16 pairs for FC2's BF16 dot products (this work-item's own stores, read back).
      for (int c = 0; c < MOE_BLOCK / 16; ++c)
        vstore8(moe_bf16_quads16(as_uint16(vload16(c, dst))), 0, x2q + (long)(start + m) * (inter / 2) + rb / 2 + 8 * c);
#else
      (void)x2q;
#endif
#endif
    }
  }
}
#endif

#if MOE_PANEL
// A run's FC1 sums (moe_fp4_vec.cl, "Prefill panels"): the work-item's gate and up rows are
// decoded once per K slice into `panel` (gate, then up) and multiplied with each of the run's
// `count` pairs from slot `start`, MOE_TILE_M pairs at a time in registers.
inline void moe_fc1_panel(const __global uint* gw, const __global moe_scale_t* gs, const __global uint* uw,
                          const __global moe_scale_t* us, int hidden, int scale_exp, const __global float* x1,
                          int start, int count, floatV* ag, floatV* au, __local float* panel) {
  __local float* pg = panel;
  __local float* pu = panel + MOE_PANEL_K * MOE_VEC;
  for (int i = 0; i < MOE_PANEL_TILES * MOE_TILE_M; ++i) ag[i] = au[i] = (floatV)(0.0f);
  for (int k0 = 0; k0 < hidden; k0 += MOE_PANEL_K) {
    const int kn = min(MOE_PANEL_K, hidden - k0);
    moe_panel_decode(gw, gs, scale_exp, k0, kn, pg);
    moe_panel_decode(uw, us, scale_exp, k0, kn, pu);
    for (int m0 = 0; m0 < count; m0 += MOE_TILE_M) {
      const __global float* xr[MOE_TILE_M];
      floatV g[MOE_TILE_M], u[MOE_TILE_M];
#pragma unroll
      for (int m = 0; m < MOE_TILE_M; ++m) {
        xr[m] = x1 + (long)(start + min(m0 + m, count - 1)) * hidden + k0;
        g[m] = ag[m0 + m];
        u[m] = au[m0 + m];
      }
      for (int k = 0; k < kn; ++k) {
        const floatV dg = moe_loadV(pg + k * MOE_VEC), du = moe_loadV(pu + k * MOE_VEC);
#pragma unroll
        for (int m = 0; m < MOE_TILE_M; ++m) {
          const floatV xv = (floatV)(xr[m][k]);
          g[m] = fma(dg, xv, g[m]);
          u[m] = fma(du, xv, u[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < MOE_TILE_M; ++m) {
        ag[m0 + m] = g[m];
        au[m0 + m] = u[m];
      }
    }
  }
}
#define MOE_FC1_PAIRS (MOE_PANEL_TILES * MOE_TILE_M)
#else
#define MOE_FC1_PAIRS MOE_TILE_M
#endif

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL, 1, 1))) void moe_fc1(
    __global const uint* gate_w, __global const moe_scale_t* gate_s, __global const uint* up_w,
    __global const moe_scale_t* up_s, __global const float* fc1_factor, int hidden, int inter, int scale_exp,
    __global const float* x1, __global const int* tiles, __global const int* chunk_info,
    __global const float* fc2_input_scale, __global float* x2, __global const uint* x1q, __global uint* x2q,
    __global const float* fc1_bias) {
#if MOE_W4A4
  __local float a_local[MOE_TILE_M * MOE_LOCAL * MOE_VEC];
#endif
  // Work-groups past the chunk's tiles (and, with panels, those whose tile another work-group
  // serves) compute nothing, but still reach the barriers below (no early return: a work-group
  // must meet its barriers together, and compilers cannot tell that the condition is uniform).
  const int tile = get_group_id(1);
  const bool active = tile < chunk_info[0];
  const int e = active ? tiles[3 * tile] : 0, start = active ? tiles[3 * tile + 1] : 0;
  const int count = active ? tiles[3 * tile + 2] : 0;
  const int lid = get_local_id(0), r = get_global_id(0) * MOE_VEC;
  int pairs = count;  // the pairs from `start` this work-group serves
#if MOE_PANEL
  __local float panel[MOE_LOCAL * 2 * MOE_PANEL_K * MOE_VEC];
  const int run = active ? moe_panel_run(tiles, chunk_info[0], tile, &pairs) : 1;
  if (run == 0) pairs = 0;
#endif
  floatV hg[MOE_FC1_PAIRS], hu[MOE_FC1_PAIRS];
  if (pairs > 0 && r < inter) {
    const long group = (long)e * ((inter + MOE_GROUP - 1) / MOE_GROUP) + r / MOE_GROUP;
    const int lane = r % MOE_GROUP;
    const long words = group * (hidden / 8) * MOE_GROUP + lane;
    const long scales = group * (hidden / MOE_BLOCK) * MOE_GROUP + lane;
#define MOE_FC1_DOT(n) \
  moe_fc1_dot(gate_w + words, gate_s + scales, up_w + words, up_s + scales, hidden, scale_exp, x1, x1q, start, count, n, \
              hg, hu)
#if MOE_PANEL
    if (run > 1)
      moe_fc1_panel(gate_w + words, gate_s + scales, up_w + words, up_s + scales, hidden, scale_exp, x1, start, pairs,
                    hg, hu, panel + lid * 2 * MOE_PANEL_K * MOE_VEC);
    else
#endif
    if (count == 1) MOE_FC1_DOT(1);
#if MOE_TILE_M >= 4
    else if (count <= 2) MOE_FC1_DOT(2);
#endif
#if MOE_TILE_M >= 8
    else if (count <= 4) MOE_FC1_DOT(4);
#endif
    else MOE_FC1_DOT(MOE_TILE_M);
#undef MOE_FC1_DOT
  }
  const float2 f = vload2(e, fc1_factor);
#if MOE_W4A4
  // Tile by tile, each block of the work-group's a values is quantized (moe_quant.cl). The trip
  // count is a constant, so every work-item meets the same barriers.
#pragma unroll
  for (int t = 0; t < MOE_FC1_PAIRS / MOE_TILE_M; ++t) {
    const int n = clamp(pairs - t * MOE_TILE_M, 0, MOE_TILE_M);
    if (t > 0) barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's quantization has read a_local
    if (r < inter)
      for (int m = 0; m < n; ++m)
        moe_storeV(moe_fc1_act(hg[t * MOE_TILE_M + m], hu[t * MOE_TILE_M + m], f, fc1_bias, e, inter, r),
                   a_local + (m * MOE_LOCAL + lid) * MOE_VEC);
    barrier(CLK_LOCAL_MEM_FENCE);
    moe_fc1_quantize_tile(a_local, e, start + t * MOE_TILE_M, n, inter, fc2_input_scale, x2, x2q);
  }
#else
  (void)fc2_input_scale;
  if (r < inter)
    for (int m = 0; m < pairs; ++m) {
      const floatV a = moe_fc1_act(hg[m], hu[m], f, fc1_bias, e, inter, r);
      moe_storeV(a, x2 + (long)(start + m) * inter + r);
#if MOE_BF16DOT
      vstore8(moe_bf16_quads16(as_uint16(a)), 0, x2q + (long)(start + m) * (inter / 2) + r / 2);  // MOE_VEC = 16
#elif MOE_SCALEDX
      // FC2's scaled form (moe_scaled_x.cl): this work-item's 8 rows are one chunk.
      moe_sx_store8(a, (__global float*)x2q + (long)(start + m) * MOE_SX_ROW(inter), inter, r / 8);
#elif MOE_INTDOT
      // FC2's integer planes (moe_int_planes.cl): this work-item's 8 rows are one chunk.
      moe_ip_store8(a, x2q + (long)(start + m) * MOE_IP_ROW(inter, 8), inter, r / 8);
#endif
    }
#if !MOE_BF16DOT && !MOE_SCALEDX && !MOE_INTDOT
  (void)x2q;
#endif
#endif
}
