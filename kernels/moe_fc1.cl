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
//   fc1_factor [E, 2]  per expert {gate, up}: alpha = input scale (gs_d, W4A4) × dequant global
//                   scale × 2^-(scale_exp + MOE_E2M1_EXP), so gate and up keep their own scales
//   fc2_input_scale [E]  W4A4 NVFP4: quant-direction global scale of the FC2 input
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

// Gate and up dot products of the work-item's rows for the first `n` pairs of a tile. Each call
// site passes a constant n, so the loops unroll and the accumulators stay in registers; pairs
// past `count` repeat the last one.
__attribute__((always_inline)) inline void moe_fc1_dot(const __global uint* gw, const __global moe_scale_t* gs,
                                                       const __global uint* uw, const __global moe_scale_t* us, int hidden,
                                                       int scale_exp, const __global float* x1, int start, int count,
                                                       const int n, floatV* hg, floatV* hu) {
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

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL, 1, 1))) void moe_fc1(
    __global const uint* gate_w, __global const moe_scale_t* gate_s, __global const uint* up_w,
    __global const moe_scale_t* up_s, __global const float* fc1_factor, int hidden, int inter, int scale_exp,
    __global const float* x1, __global const int* tiles, __global const int* chunk_info,
    __global const float* fc2_input_scale, __global float* x2) {
#if MOE_W4A4
  __local float a_local[MOE_TILE_M * MOE_LOCAL * MOE_VEC];
#endif
  // Work-groups past the chunk's tiles do nothing, but still reach the barrier below (no early
  // return: a work-group must meet its barriers together, and compilers cannot tell that the
  // condition is uniform).
  const int tile = get_group_id(1);
  const bool active = tile < chunk_info[0];
  const int e = active ? tiles[3 * tile] : 0, start = active ? tiles[3 * tile + 1] : 0;
  const int count = active ? tiles[3 * tile + 2] : 0;
  const int lid = get_local_id(0), r = get_global_id(0) * MOE_VEC;
  if (active && r < inter) {
    const long group = (long)e * ((inter + MOE_GROUP - 1) / MOE_GROUP) + r / MOE_GROUP;
    const int lane = r % MOE_GROUP;
    const long words = group * (hidden / 8) * MOE_GROUP + lane;
    const long scales = group * (hidden / MOE_BLOCK) * MOE_GROUP + lane;
    floatV hg[MOE_TILE_M], hu[MOE_TILE_M];
#define MOE_FC1_DOT(n) \
  moe_fc1_dot(gate_w + words, gate_s + scales, up_w + words, up_s + scales, hidden, scale_exp, x1, start, count, n, hg, hu)
    if (count == 1) MOE_FC1_DOT(1);
#if MOE_TILE_M >= 4
    else if (count <= 2) MOE_FC1_DOT(2);
#endif
#if MOE_TILE_M >= 8
    else if (count <= 4) MOE_FC1_DOT(4);
#endif
    else MOE_FC1_DOT(MOE_TILE_M);
#undef MOE_FC1_DOT
    const float2 f = vload2(e, fc1_factor);
    for (int m = 0; m < MOE_TILE_M && m < count; ++m) {
      const floatV a = moe_round_bf16(moe_silu(hg[m] * f.x) * (hu[m] * f.y));
#if MOE_W4A4
      moe_storeV(a, a_local + (m * MOE_LOCAL + lid) * MOE_VEC);
#else
      moe_storeV(a, x2 + (long)(start + m) * inter + r);
#endif
    }
  }
#if MOE_W4A4
  // Quantize each block of the work-group's a values (moe_quant.cl).
  barrier(CLK_LOCAL_MEM_FENCE);
  const int rows = MOE_LOCAL * MOE_VEC, blocks = rows / MOE_BLOCK, r0 = get_group_id(0) * rows;
#ifdef MOE_NVFP4
  const float gs = active ? fc2_input_scale[e] : 1.0f;
#else
  const float gs = 1.0f;
#endif
  for (int job = lid; job < MOE_TILE_M * blocks; job += MOE_LOCAL) {
    const int m = job / blocks, rb = r0 + (job % blocks) * MOE_BLOCK;
    if (m < count && rb < inter) {
      float v[MOE_BLOCK];
      for (int i = 0; i < MOE_BLOCK; ++i) v[i] = a_local[m * rows + (job % blocks) * MOE_BLOCK + i];
      moe_quantize_block(v, gs, x2 + (long)(start + m) * inter + rb);
    }
  }
#endif
}
