// FP4 linear, GEMV shape for GPUs (decode: few tokens, bandwidth-bound): y[m, n] = x[m, :] · W[n, :].
//
// The design of the MoE split kernels (moe_split.cl) for one matrix: every weight row is split
// over SPLIT_LANES work-items of a lane group (the "split layout", common/fp4_split.cl), lane l
// reading uint4 word l of each step of 32·L elements, so that neighbouring work-items load
// neighbouring 16-byte words (coalesced) and neighbouring activations. A work-group of
// SPLIT_LOCAL work-items owns a tile of SPLIT_ROWS = SPLIT_LOCAL / L · SPLIT_RPG output rows and
// up to T tokens (the kernel variant linear_gemv_split_T, T = 1, 2, 4, 8, 16 ≤ SPLIT_TOKENS): the
// tile's weights stream once for all T tokens, each decoded 32-weight step feeding T dot products.
// The tokens' activations are staged in local memory as fp32, SPLIT_STAGE floats at a time (a
// chunk of whole steps for all T tokens): BF16 → fp32 (W4A16) or quantized per block with the
// linear layer's recipe (W4A4: moe_quant.cl's block quantizer on common/quant_recipe.cl, FP4.md
// §3 NVFP4 with the quant-direction input global scale, §4 MXFP4 — the same values as
// linear_activations.cl's linear_quantize_fp4). Every work-group quantizes all of its tokens, so
// W4A4 calls of several tokens instead take the values from that pre-pass (SPLIT_X_FLOAT: one
// launch more, one quantization per call). Elements past K (the layout pads K to a multiple of
// 32) are zero.
//
// Reduction (deterministic): each lane sums its own steps in order (per step: two FMA chains,
// common/fp4_split.cl), the lanes' partial sums meet in local memory and one work-item per
// (row, token) adds them in lane order. A token's result does not depend on T or on the other
// tokens of its work-group.
//
// Epilogue: fp4_store_output (common/fp4_dot.cl): y = sum × epilogue (+ bias[n]), fp32 or BF16.
// The host folds alpha (the global scales) and 2^-(scale_exp + E2M1 exponent) into `epilogue`.
//
// Build options:
//   FP4CL_FORMAT_MXFP4   1 MXFP4, 0 NVFP4
//   LINEAR_W4A4          1: quantize the activations (needs exact fp32 division for NVFP4)
//   SPLIT_X_FLOAT        1: read the activation pre-pass's split fp32 rows instead of BF16 (W4A4
//                        calls of SPLIT_PREPASS_TOKENS or more tokens: quantized once per call
//                        instead of once per work-group; the same values)
//   MOE_E2M1_NO_DENORM   exact E2M1 decode (devices that flush fp32 denormals; moe_build_options)
//   SPLIT_LANES          L, a power of two ≤ 32 dividing KPAD / 32
//   SPLIT_LOCAL          work-group size, a multiple of SPLIT_LANES
//   SPLIT_RPG            rows per lane group
//   SPLIT_TOKENS         the largest T built (1, 2, 4, 8 or 16)
//   SPLIT_STAGE          local floats for the staged activations (≥ SPLIT_TOKENS · 32 · L)
// Launch: global (ceil(N / SPLIT_ROWS) · SPLIT_LOCAL, ceil(M / T)), local (SPLIT_LOCAL, 1).
#if !FP4CL_FORMAT_MXFP4
#define FP4_SPLIT_NVFP4
#define MOE_NVFP4  // moe_quant.cl's NVFP4 recipe
#define SPLIT_BLOCK 16
#else
#define SPLIT_BLOCK 32
#endif
#ifdef MOE_E2M1_NO_DENORM
#define FP4_SPLIT_E2M1_NO_DENORM
#endif
#include "common/bf16.cl"
#include "common/fp4_dot.cl"
#include "common/fp4_split.cl"
#if LINEAR_W4A4
#include "moe_quant.cl"
#endif

#ifndef SPLIT_X_FLOAT
#define SPLIT_X_FLOAT 0
#endif
#if SPLIT_X_FLOAT
typedef float split_x_t;
#else
typedef ushort split_x_t;
#endif

#define SPLIT_STEP (32 * SPLIT_LANES)
#define SPLIT_LANE_GROUPS (SPLIT_LOCAL / SPLIT_LANES)
#define SPLIT_ROWS (SPLIT_LANE_GROUPS * SPLIT_RPG)
#define SPLIT_SGROUPS FP4_SPLIT_GROUPS(SPLIT_LANES, SPLIT_BLOCK)

// Elements [c0, c0 + len) of tokens m0 .. m0 + tokens - 1 as fp32 at xl[t·len + i]; tokens past
// M and elements past K are zero. Neighbouring work-items take neighbouring groups of 4 elements
// (one 8-byte BF16 load, or two float2 loads of the split rows; K is a multiple of 16 and c0 of
// 32, so a group is all in or out) or neighbouring blocks (W4A4 quantized here).
inline void split_stage(__local float* xl, const __global split_x_t* x, int x_stride, int m0, int tokens, int m,
                        int k, int c0, int len, float gs) {
  const int lid = get_local_id(0);
  for (int t = 0; t < tokens; ++t) {
    const bool live = m0 + t < m;
    const __global split_x_t* src = x + (long)(m0 + t) * x_stride;
    __local float* dst = xl + t * len;
#if SPLIT_X_FLOAT
    for (int i = lid; i < len / 4; i += SPLIT_LOCAL) {
      const int e = c0 + 4 * i;
      float4 v = (float4)(0.0f);
      if (live && e < k) {
        const float2 even = vload2(0, src + e / 2), odd = vload2(0, src + x_stride / 2 + e / 2);
        v = (float4)(even.x, odd.x, even.y, odd.y);
      }
      vstore4(v, i, dst);
    }
#elif LINEAR_W4A4
    for (int b = lid; b < len / MOE_QUANT_BLOCK; b += SPLIT_LOCAL) {
      const int e0 = c0 + b * MOE_QUANT_BLOCK;
      __local float* out = dst + b * MOE_QUANT_BLOCK;
      if (live && e0 < k) {  // K is a multiple of the block: a block is all in or all out
        float v[MOE_QUANT_BLOCK];
        for (int j = 0; j < MOE_QUANT_BLOCK; ++j) v[j] = bf16_to_float(src[e0 + j]);
        moe_quantize_block_local(v, gs, out);
      } else {
        for (int j = 0; j < MOE_QUANT_BLOCK; ++j) out[j] = 0.0f;
      }
    }
#else
    for (int i = lid; i < len / 4; i += SPLIT_LOCAL) {
      const int e = c0 + 4 * i;
      float4 v = (float4)(0.0f);
      if (live && e < k) v = bf16x4(src + e);
      vstore4(v, i, dst);
    }
#endif
  }
#if SPLIT_X_FLOAT || !LINEAR_W4A4
  (void)gs;
#endif
}

// The body of every variant; `tokens` (T) is a compile-time constant at each call.
inline void gemv_split(const __global uint4* restrict w, const __global uint2* restrict ws,
                       const __global split_x_t* restrict x, int x_stride, __global uchar* restrict y,
                       const __global float* restrict bias, int n, int k, int kpad, int m, int scale_exp,
                       float epilogue, float gs, int has_bias, int out_bf16, const int tokens, __local float* xl,
                       __local float* part) {
  const int lid = get_local_id(0), lane = lid % SPLIT_LANES, g = lid / SPLIT_LANES;
  const int row0 = get_group_id(0) * SPLIT_ROWS, m0 = get_group_id(1) * tokens;
  const int chunk_steps = max(1, SPLIT_STAGE / (tokens * SPLIT_STEP));
  const int steps = kpad / SPLIT_STEP;
  const long row_words = kpad / 32, row_scales = (long)steps * SPLIT_SGROUPS;
  const int sgroup = 4 * SPLIT_LANES >= SPLIT_BLOCK ? 4 * lane / SPLIT_BLOCK : 0;
  float acc[SPLIT_RPG][SPLIT_TOKENS];
  long row_of[SPLIT_RPG];
#pragma unroll
  for (int r = 0; r < SPLIT_RPG; ++r) {
    row_of[r] = min(row0 + r * SPLIT_LANE_GROUPS + g, n - 1);  // rows past N repeat the last one
#pragma unroll
    for (int t = 0; t < tokens; ++t) acc[r][t] = 0.0f;
  }
  for (int s0 = 0; s0 < steps; s0 += chunk_steps) {
    const int cs = min(chunk_steps, steps - s0), len = cs * SPLIT_STEP;
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous chunk is consumed
    split_stage(xl, x, x_stride, m0, tokens, m, k, s0 * SPLIT_STEP, len, gs);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = 0; st < cs; ++st) {
      const __local float* xs = xl + st * SPLIT_STEP + 4 * lane;
#pragma unroll
      for (int r = 0; r < SPLIT_RPG; ++r) {
        const uint4 wv = w[row_of[r] * row_words + (long)(s0 + st) * SPLIT_LANES + lane];
        const uint2 sb = ws[row_of[r] * row_scales + (long)(s0 + st) * SPLIT_SGROUPS + sgroup];
        float sv[8], wf[32];
        fp4_split_scales(sb, scale_exp, sv);
        fp4_split_weights(wv, sv, wf);
#pragma unroll
        for (int t = 0; t < tokens; ++t) acc[r][t] += fp4_split_dot_local(wf, xs + t * len, 4 * SPLIT_LANES);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < SPLIT_RPG; ++r)
#pragma unroll
    for (int t = 0; t < tokens; ++t) part[(t * SPLIT_ROWS + r * SPLIT_LANE_GROUPS + g) * SPLIT_LANES + lane] = acc[r][t];
  barrier(CLK_LOCAL_MEM_FENCE);
  // One work-item per (row, token) sums the row's lanes in lane order.
  for (int i = lid; i < tokens * SPLIT_ROWS; i += SPLIT_LOCAL) {
    const int t = i / SPLIT_ROWS, lr = i % SPLIT_ROWS, row = row0 + lr, mm = m0 + t;
    if (row < n && mm < m) {
      float sum = 0.0f;
      for (int l = 0; l < SPLIT_LANES; ++l) sum += part[(t * SPLIT_ROWS + lr) * SPLIT_LANES + l];
      fp4_store_output(y, (ulong)mm * n + row, sum, epilogue, bias, has_bias, (uint)row, out_bf16);
    }
  }
}

//   w [N, KPAD/32] uint4 and ws block scales: the split layout (host/prepare/fp4_split_layout.hpp)
//   x [M, x_stride] BF16 (the caller's, x_stride = K) or, with SPLIT_X_FLOAT, the activation
//     pre-pass's split fp32 rows (linear_activations.cl: x_stride = K rounded up to 64, even
//     elements first, then odd ones; W4A4 already quantized there)
//   y [M, N] fp32 or BF16, bias [N] fp32 (has_bias)
//   gs: the quant-direction global scale of NVFP4 W4A4 activations (else unused)
#define SPLIT_KERNEL(NAME, T)                                                                                  \
  __kernel __attribute__((reqd_work_group_size(SPLIT_LOCAL, 1, 1))) void NAME(                                 \
      const __global uint4* restrict w, const __global uint2* restrict ws, const __global split_x_t* restrict x, \
      __global uchar* restrict y, const __global float* restrict bias, int n, int k, int kpad, int m,          \
      int scale_exp, float epilogue, float gs, int has_bias, int out_bf16, int x_stride) {                     \
    __local float xl[SPLIT_STAGE];                                                                             \
    __local float part[(T) * SPLIT_ROWS * SPLIT_LANES];                                                        \
    gemv_split(w, ws, x, x_stride, y, bias, n, k, kpad, m, scale_exp, epilogue, gs, has_bias, out_bf16, (T), xl,  \
               part);                                                                                          \
  }
SPLIT_KERNEL(linear_gemv_split_1, 1)
#if SPLIT_TOKENS >= 2
SPLIT_KERNEL(linear_gemv_split_2, 2)
#endif
#if SPLIT_TOKENS >= 4
SPLIT_KERNEL(linear_gemv_split_4, 4)
#endif
#if SPLIT_TOKENS >= 8
SPLIT_KERNEL(linear_gemv_split_8, 8)
#endif
#if SPLIT_TOKENS >= 16
SPLIT_KERNEL(linear_gemv_split_16, 16)
#endif
