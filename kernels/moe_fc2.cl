// MoE FC2 and the top-k reduction.
//
//   moe_fc2         (grouped) one output row n per work-item, one tile per work-group row:
//                   streams row n of the tile's expert once for its up to MOE_TILE_M pairs and
//                   writes y[pair, n] (fp32).
//   moe_reduce      out[t, n] = Σ_s w[t,s] · y[t·k+s, n], s = 0..k-1 in order, local pairs only.
//   moe_fc2_reduce  (decode) both at once: one (n, t) per work-item, slot by slot in order.
// The sum always runs in slot order from 0.0f, with no atomics: bit-identical run to run.
//
// Build-time parameters: MOE_TILE_M, MOE_LOCAL_H (work-group size along H), MOE_NVFP4 (else
// MXFP4), MOE_OUT_BF16, MOE_E2M1_NO_DENORM. (W4A4 and W4A16 differ only in what x2 holds.)
//   x2 [slots, I] FC2 inputs, each row [even | odd] (moe_fc1)
//   fc2_factor [E] dequant global scale × FC2 input global scale⁻¹ × 2^-(scale_exp + MOE_E2M1_EXP)
#include "moe_fp4_vec.cl"

#define TM MOE_TILE_M

// Σ over row n of expert e against one FC2 input row (the decode path's dot product).
inline float moe_fc2_dot(const __global uchar* row, const __global uchar* row_s, const __global float* xr, int inter,
                         int scale_exp) {
  const int odd_at = inter / 2, chunks = inter / 32;
  float16 acc = (float16)(0.0f);
  for (int j = 0; j < chunks; ++j) {
    float16 lo, hi;
    MOE_LOAD_CHUNK(row, row_s, j, scale_exp, lo, hi);
    acc = fma(lo, vload16(j, xr), acc);
    acc = fma(hi, vload16(j, xr + odd_at), acc);
  }
  float tail = 0.0f;
#ifdef MOE_NVFP4
  if (inter % 32 != 0) {
    float8 lo, hi;
    MOE_LOAD_TAIL(row, row_s, chunks, scale_exp, lo, hi);
    tail = moe_sum8(fma(hi, vload8(0, xr + odd_at + 16 * chunks), lo * vload8(0, xr + 16 * chunks)));
  }
#endif
  return moe_sum16(acc) + tail;
}

inline void moe_store(__global void* out, long i, float v) {
#if MOE_OUT_BF16
  ((__global ushort*)out)[i] = (ushort)float_to_bf16(v);
#else
  ((__global float*)out)[i] = v;
#endif
}

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL_H, 1, 1))) void moe_fc2(__global const uchar* w2, __global const uchar* w2_scales, __global const float* fc2_factor,
                      int hidden, int inter, int scale_exp, __global const float* x2, __global const int* tiles,
                      __global const int* chunk_info, __global const int* slot_pair, __global float* y) {
  const int n = get_global_id(0), tile = get_group_id(1);
  if (n >= hidden || tile >= chunk_info[0]) return;
  const int e = tiles[3 * tile], start = tiles[3 * tile + 1], count = tiles[3 * tile + 2];
  const long row_index = (long)e * hidden + n;
  const __global uchar* row = w2 + row_index * (inter / 2);
  const __global uchar* row_s = w2_scales + row_index * (inter / MOE_BLOCK);
  const int odd_at = inter / 2, chunks = inter / 32;
  const __global float* xr[TM];
  float16 acc[TM];
  float tail[TM];
#pragma unroll
  for (int m = 0; m < TM; ++m) {
    xr[m] = x2 + (long)(start + min(m, count - 1)) * inter;
    acc[m] = (float16)(0.0f);
    tail[m] = 0.0f;
  }
  for (int j = 0; j < chunks; ++j) {
    float16 lo, hi;
    MOE_LOAD_CHUNK(row, row_s, j, scale_exp, lo, hi);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      acc[m] = fma(lo, vload16(j, xr[m]), acc[m]);
      acc[m] = fma(hi, vload16(j, xr[m] + odd_at), acc[m]);
    }
  }
#ifdef MOE_NVFP4
  if (inter % 32 != 0) {
    float8 lo, hi;
    MOE_LOAD_TAIL(row, row_s, chunks, scale_exp, lo, hi);
#pragma unroll
    for (int m = 0; m < TM; ++m)
      tail[m] = moe_sum8(fma(hi, vload8(0, xr[m] + odd_at + 16 * chunks), lo * vload8(0, xr[m] + 16 * chunks)));
  }
#endif
  const float f = fc2_factor[e];
#pragma unroll
  for (int m = 0; m < TM; ++m) {
    if (m < count) y[(long)slot_pair[start + m] * hidden + n] = (moe_sum16(acc[m]) + tail[m]) * f;
  }
}

__kernel void moe_reduce(__global const float* y, __global const int* pair_expert, __global const float* pair_weight,
                         int top_k, int hidden, int num_tokens, int token_offset, __global void* out) {
  const int n = get_global_id(0), t = get_global_id(1);
  if (n >= hidden || t >= num_tokens) return;
  float o = 0.0f;
  for (int s = 0; s < top_k; ++s) {
    const int p = t * top_k + s;
    if (pair_expert[p] >= 0) o += pair_weight[p] * y[(long)p * hidden + n];
  }
  moe_store(out, ((long)token_offset + t) * hidden + n, o);
}

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL_H, 1, 1))) void moe_fc2_reduce(__global const uchar* w2, __global const uchar* w2_scales,
                             __global const float* fc2_factor, int hidden, int inter, int scale_exp,
                             __global const float* x2, __global const int* pair_expert,
                             __global const int* pair_slot, __global const float* pair_weight, int top_k,
                             int num_tokens, int token_offset, __global void* out) {
  const int n = get_global_id(0), t = get_global_id(1);
  if (n >= hidden || t >= num_tokens) return;
  float o = 0.0f;
  for (int s = 0; s < top_k; ++s) {
    const int p = t * top_k + s, e = pair_expert[p];
    if (e < 0) continue;
    const long row_index = (long)e * hidden + n;
    const float y = moe_fc2_dot(w2 + row_index * (inter / 2), w2_scales + row_index * (inter / MOE_BLOCK),
                                x2 + (long)pair_slot[p] * inter, inter, scale_exp) *
                    fc2_factor[e];
    o += pair_weight[p] * y;
  }
  moe_store(out, ((long)token_offset + t) * hidden + n, o);
}
