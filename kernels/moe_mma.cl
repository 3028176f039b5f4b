// MoE expert GEMMs on tensor cores (the `mma` strategy): the grouped pipeline (moe_dispatch.cl's
// sort and gather, moe_fc2.cl's top-k sum) with FC1 and FC2 as m16n8k16 BF16 MMAs with fp32
// accumulation (common/fp4_mma.cl) over weights in the MMA layout
// (host/prepare/fp4_mma_layout.hpp).
//
//   moe_mma_fc1  one work-group per (MMA_ROWS rows of I, tile of up to MMA_TOKENS pairs of one
//                expert): warp (rt, ks) multiplies the 16 gate rows and the 16 up rows of row
//                tile rt with the tile's tokens (MMA_NT MMAs of 8 tokens per k16 step) over the
//                ks-th of MMA_KSPLIT equal slices of K = H; the slices' partial sums meet in
//                local memory and are added in slice order; a = bf16(silu(g) × up) (W4A4:
//                quantized per block) to x2 [slots, I].
//   moe_mma_fc2  the same for W2 over K = I: y[pair, n] = fc2_factor[e] · (W2[e] x2[slot])[n].
//
// Each lane streams one uint4 of codes (four MMAs' A fragments) and one uint2 / uint of block
// scales per 64 elements of K: a warp reads 512 contiguous bytes of codes per chunk. Activations
// (x1 / x2, fp32 numbers that are BF16 numbers: BF16 inputs, bf16-rounded SwiGLU outputs, or
// W4A4's e2m1 × scale) are staged in local memory as BF16 pairs, MMA_KSTAGE chunks of every K
// slice at a time, and read from there as B fragments by all MMA_RT row tiles of the work-group
// (a token's row stride padded to 4 words more than 32·MMA_KSTAGE: the fragment reads of a warp,
// 8 tokens × 4 pairs, hit 32 different banks). Tokens past the tile's count repeat its last one
// (computed, not stored).
//
// Build-time parameters: MOE_NVFP4 (else MXFP4), MOE_W4A4, FP4_MMA_PTX (common/fp4_mma.cl),
//   MMA_NT (MMAs of 8 tokens a step: tiles of 8·MMA_NT pairs), MMA_RT (row tiles of 16 a
//   work-group), MMA_KSPLIT (warps splitting K; it divides the GEMM's K / 64, the host checks),
//   MMA_KSTAGE (chunks of 64 staged per K slice at a time). Work-group: 32 · MMA_RT · MMA_KSPLIT
//   work-items; the work-group's rows (16 · MMA_RT) divide I (FC1) and H (FC2); under W4A4 FC1's
//   are a multiple of the FP4 block.
#define MOE_VEC 1
#include "moe_fp4_vec.cl"
#include "moe_quant.cl"
#ifdef MOE_NVFP4
#define FP4_MMA_NVFP4
#endif
#include "common/fp4_mma.cl"

#define MMA_WARPS (MMA_RT * MMA_KSPLIT)
#define MMA_LOCAL (32 * MMA_WARPS)
#define MMA_ROWS (16 * MMA_RT)
#define MMA_TOKENS (8 * MMA_NT)
#ifdef MOE_NVFP4
typedef uint2 mma_scales_t;  // 4 blocks of 16 of row g (x) and of row g + 8 (y)
#else
typedef uint mma_scales_t;   // 2 blocks of 32 of row g (bytes 0, 1) and of row g + 8 (bytes 2, 3)
#endif

// The BF16 scale pair of k16 tile j (0..3) of a chunk for row g (upper 0) or g + 8 (upper 1).
inline uint mma_scale_of(mma_scales_t sb, int j, int upper, int scale_exp) {
#ifdef MOE_NVFP4
  return fp4_mma_scale(((upper ? sb.y : sb.x) >> (8 * j)) & 0xFFu, scale_exp);
#else
  return fp4_mma_scale((sb >> (8 * (2 * upper + j / 2))) & 0xFFu, scale_exp);
#endif
}

// The scaled A fragment of k16 tile j of a lane's chunk.
inline void mma_fragment(uint word, mma_scales_t sb, int j, int scale_exp, uint* a) {
  const uint lo = mma_scale_of(sb, j, 0, scale_exp), hi = mma_scale_of(sb, j, 1, scale_exp);
  a[0] = fp4_mma_scaled(fp4_mma_pair(word, 0), lo);
  a[1] = fp4_mma_scaled(fp4_mma_pair(word, 1), hi);
  a[2] = fp4_mma_scaled(fp4_mma_pair(word, 2), lo);
  a[3] = fp4_mma_scaled(fp4_mma_pair(word, 3), hi);
}

inline uint mma_word(uint4 w, int j) { return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w; }

#define MMA_XSTRIDE (32 * MMA_KSTAGE + 4)
#define MMA_XWORDS (MMA_KSPLIT * MMA_TOKENS * MMA_XSTRIDE)
// One local buffer holds the staged activations during the K loop and the K slices' partial
// sums (FC1: gate and up) after it.
#define MMA_PART_FLOATS (MMA_KSPLIT * MMA_RT * MMA_MATS * MMA_NT * 128)
#define MMA_LDS_WORDS (MMA_XWORDS > MMA_PART_FLOATS ? MMA_XWORDS : MMA_PART_FLOATS)

// Stages chunks [s0, s0 + n) of every K slice (slice ks starts at chunk ks · per_warp) of the
// tile's tokens as BF16 pairs: xs[(ks · MMA_TOKENS + m) · MMA_XSTRIDE + p] = elements 2p, 2p + 1
// of the staged range. Called by the whole work-group between barriers.
inline void mma_stage(__local uint* xs, const __global float* x, int k_len, int start, int count, int per_warp,
                      int s0, int n) {
  const int pairs = 32 * n, per_slice = MMA_TOKENS * pairs;
  for (int i = get_local_id(0); i < MMA_KSPLIT * per_slice; i += MMA_LOCAL) {
    const int ks = i / per_slice, m = (i % per_slice) / pairs, p = i % pairs;
    const float2 v =
        vload2(0, x + (long)(start + min(m, count - 1)) * k_len + 64 * (ks * per_warp + s0) + 2 * p);
    xs[(ks * MMA_TOKENS + m) * MMA_XSTRIDE + p] = fp4_mma_pack(v.x, v.y);
  }
}

// Element (row rr of 16, column col of 8) of a C fragment: its lane · 4 + register.
inline int mma_c_index(int rr, int col) { return (4 * (rr % 8) + col / 2) * 4 + 2 * (rr / 8) + col % 2; }

#ifdef MMA_FC1
#define MMA_MATS 2
//   gate_w, up_w [E·I/16, H/64, 32] uint4, gate_s, up_s their scales (MMA layout)
//   fc1_factor [E, 2], fc2_input_scale [E] (W4A4 NVFP4); x1 [slots, H] (moe_gather)
//   tiles, chunk_info: moe_sort's; x2 [slots, I] (written)
__kernel __attribute__((reqd_work_group_size(MMA_LOCAL, 1, 1))) void moe_mma_fc1(
    __global const uint4* gate_w, __global const mma_scales_t* gate_s, __global const uint4* up_w,
    __global const mma_scales_t* up_s, __global const float* fc1_factor, int hidden, int inter, int scale_exp,
    __global const float* x1, __global const int* tiles, __global const int* chunk_info,
    __global const float* fc2_input_scale, __global float* x2) {
  __local uint lds[MMA_LDS_WORDS];
  __local uint scratch[MMA_WARPS * FP4_MMA_SCRATCH_WORDS];
  __local uint* xs = lds;
  __local float* part = (__local float*)lds;
#if MOE_W4A4
  __local float a_local[MMA_TOKENS * MMA_ROWS];
#endif
  const int tile = get_group_id(1);
  if (tile >= chunk_info[0]) return;  // uniform over the work-group
  const int e = tiles[3 * tile], start = tiles[3 * tile + 1], count = tiles[3 * tile + 2];
  const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;
  const int rt_local = warp % MMA_RT, ks = warp / MMA_RT, g = lane / 4, t = lane % 4;
  const int row0 = get_group_id(0) * MMA_ROWS;
  const int chunks = hidden / 64, per_warp = chunks / MMA_KSPLIT;
  const long rt = ((long)e * inter + row0) / 16 + rt_local;
  const __global uint4* gw = gate_w + (rt * chunks + ks * per_warp) * 32 + lane;
  const __global uint4* uw = up_w + (rt * chunks + ks * per_warp) * 32 + lane;
  const __global mma_scales_t* gs = gate_s + (rt * chunks + ks * per_warp) * 8 + g;
  const __global mma_scales_t* us = up_s + (rt * chunks + ks * per_warp) * 8 + g;
  __local uint* sc = scratch + warp * FP4_MMA_SCRATCH_WORDS;
  const __local uint* xw = xs + (ks * MMA_TOKENS + g) * MMA_XSTRIDE + t;
  float cg[MMA_NT][4], cu[MMA_NT][4];
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) {
#pragma unroll
    for (int r = 0; r < 4; ++r) cg[nt][r] = cu[nt][r] = 0.0f;
  }
  for (int s0 = 0; s0 < per_warp; s0 += MMA_KSTAGE) {
    const int n = min(MMA_KSTAGE, per_warp - s0);
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous stage is consumed
    mma_stage(xs, x1, hidden, start, count, per_warp, s0, n);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int cc = 0; cc < n; ++cc) {
      const int c = s0 + cc;
      const uint4 wg = gw[c * 32], wu = uw[c * 32];
      const mma_scales_t sg = gs[c * 8], su = us[c * 8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint ag[4], au[4];
        mma_fragment(mma_word(wg, j), sg, j, scale_exp, ag);
        mma_fragment(mma_word(wu, j), su, j, scale_exp, au);
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt) {
          const __local uint* b = xw + nt * 8 * MMA_XSTRIDE + cc * 32 + 8 * j;
          const uint b0 = b[0], b1 = b[4];
          FP4_MMA(cg[nt], ag, b0, b1, sc, lane);
          FP4_MMA(cu[nt], au, b0, b1, sc, lane);
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the staged activations
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      part[(((ks * MMA_RT + rt_local) * 2 + 0) * MMA_NT + nt) * 128 + lane * 4 + r] = cg[nt][r];
      part[(((ks * MMA_RT + rt_local) * 2 + 1) * MMA_NT + nt) * 128 + lane * 4 + r] = cu[nt][r];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // One work-item per (row, token): the slices' sums in slice order, then SwiGLU.
  const float2 f = vload2(e, fc1_factor);
  for (int i = lid; i < MMA_ROWS * MMA_TOKENS; i += MMA_LOCAL) {
    const int m = i / MMA_ROWS, r = i % MMA_ROWS, rl = r / 16, nt = m / 8;
    const int at = mma_c_index(r % 16, m % 8);
    float hg = 0.0f, hu = 0.0f;
    for (int k = 0; k < MMA_KSPLIT; ++k) {
      hg += part[(((k * MMA_RT + rl) * 2 + 0) * MMA_NT + nt) * 128 + at];
      hu += part[(((k * MMA_RT + rl) * 2 + 1) * MMA_NT + nt) * 128 + at];
    }
    if (m < count) {
      const float a = moe_round_bf16(moe_silu(hg * f.x) * (hu * f.y));
#if MOE_W4A4
      a_local[m * MMA_ROWS + r] = a;
#else
      x2[(long)(start + m) * inter + row0 + r] = a;
#endif
    }
  }
#if MOE_W4A4
  barrier(CLK_LOCAL_MEM_FENCE);
#ifdef MOE_NVFP4
  const float gs2 = fc2_input_scale[e];
#else
  const float gs2 = 1.0f;
#endif
  const int blocks = MMA_ROWS / MOE_QUANT_BLOCK;
  for (int b = lid; b < MMA_TOKENS * blocks; b += MMA_LOCAL) {
    const int m = b / blocks, rb = (b % blocks) * MOE_QUANT_BLOCK;
    if (m < count) {
      float v[MOE_QUANT_BLOCK];
      for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = a_local[m * MMA_ROWS + rb + i];
      moe_quantize_block(v, gs2, x2 + (long)(start + m) * inter + row0 + rb);
    }
  }
#else
  (void)fc2_input_scale;
#endif
}
#endif  // MMA_FC1

#ifdef MMA_FC2
#define MMA_MATS 1
//   w2 [E·H/16, I/64, 32] uint4, w2_s its scales (MMA layout), fc2_factor [E]
//   x2 [slots, I] (moe_mma_fc1), tiles, chunk_info, slot_pair: moe_sort's; y [pairs, H] (written)
__kernel __attribute__((reqd_work_group_size(MMA_LOCAL, 1, 1))) void moe_mma_fc2(
    __global const uint4* w2, __global const mma_scales_t* w2_s, __global const float* fc2_factor, int hidden,
    int inter, int scale_exp, __global const float* x2, __global const int* tiles, __global const int* chunk_info,
    __global const int* slot_pair, __global float* y) {
  __local uint lds[MMA_LDS_WORDS];
  __local uint scratch[MMA_WARPS * FP4_MMA_SCRATCH_WORDS];
  __local uint* xs = lds;
  __local float* part = (__local float*)lds;
  const int tile = get_group_id(1);
  if (tile >= chunk_info[0]) return;  // uniform over the work-group
  const int e = tiles[3 * tile], start = tiles[3 * tile + 1], count = tiles[3 * tile + 2];
  const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;
  const int rt_local = warp % MMA_RT, ks = warp / MMA_RT, g = lane / 4, t = lane % 4;
  const int row0 = get_group_id(0) * MMA_ROWS;
  const int chunks = inter / 64, per_warp = chunks / MMA_KSPLIT;
  const long rt = ((long)e * hidden + row0) / 16 + rt_local;
  const __global uint4* w = w2 + (rt * chunks + ks * per_warp) * 32 + lane;
  const __global mma_scales_t* s = w2_s + (rt * chunks + ks * per_warp) * 8 + g;
  __local uint* sc = scratch + warp * FP4_MMA_SCRATCH_WORDS;
  const __local uint* xw = xs + (ks * MMA_TOKENS + g) * MMA_XSTRIDE + t;
  float acc[MMA_NT][4];
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) {
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[nt][r] = 0.0f;
  }
  for (int s0 = 0; s0 < per_warp; s0 += MMA_KSTAGE) {
    const int n = min(MMA_KSTAGE, per_warp - s0);
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous stage is consumed
    mma_stage(xs, x2, inter, start, count, per_warp, s0, n);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int cc = 0; cc < n; ++cc) {
      const int c = s0 + cc;
      const uint4 wv = w[c * 32];
      const mma_scales_t sv = s[c * 8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint a[4];
        mma_fragment(mma_word(wv, j), sv, j, scale_exp, a);
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt) {
          const __local uint* b = xw + nt * 8 * MMA_XSTRIDE + cc * 32 + 8 * j;
          FP4_MMA(acc[nt], a, b[0], b[4], sc, lane);
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the staged activations
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) {
#pragma unroll
    for (int r = 0; r < 4; ++r) part[((ks * MMA_RT + rt_local) * MMA_NT + nt) * 128 + lane * 4 + r] = acc[nt][r];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float f = fc2_factor[e];
  for (int i = lid; i < MMA_ROWS * MMA_TOKENS; i += MMA_LOCAL) {
    const int m = i / MMA_ROWS, r = i % MMA_ROWS, rl = r / 16, nt = m / 8;
    const int at = mma_c_index(r % 16, m % 8);
    float h = 0.0f;
    for (int k = 0; k < MMA_KSPLIT; ++k) h += part[((k * MMA_RT + rl) * MMA_NT + nt) * 128 + at];
    if (m < count) y[(long)slot_pair[start + m] * hidden + row0 + r] = h * f;
  }
}
#endif  // MMA_FC2
