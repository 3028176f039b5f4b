// FP4 linear, tiled GEMM shape (prefill: many tokens): y[m, n] = x[m, :] · W[n, :].
//
// A work-group owns a tile of GEMM_TILE_N weight rows × GEMM_TILE_M tokens. For each panel of
// GEMM_TILE_K elements it decodes the tile's weights once into local memory, transposed to
// [k][n] (the E2M1 decode and scaling of a weight is paid once per tile instead of once per token),
// then every work-item multiplies GEMM_WI_M tokens by GEMM_WI_N vectors of FP4CL_VEC (16 or 8)
// consecutive rows: per k, GEMM_WI_N vectors of decoded weights times one broadcast activation per
// token, GEMM_WI_N · GEMM_WI_M independent vector accumulators: a register tile PoCL compiles to
// broadcast-and-FMA loops (the accumulators stay in registers while a panel is consumed), and on
// GPUs neighbouring work-items read neighbouring local-memory words. Per k a work-item loads
// GEMM_WI_N weight vectors and GEMM_WI_M activations for GEMM_WI_N · GEMM_WI_M FMAs: with one
// vector (GEMM_WI_N 1) a CPU issues a load per FMA, which bounds it below its FMA peak.
//
// Inputs: the "rows" layout and split fp32 activations described in common/fp4_dot.cl (the same as
// the GEMV kernel, so one prepared copy of the weights serves both shapes). Within a panel, local
// rows 0 .. GEMM_TILE_K/2-1 hold the even elements and the rest the odd elements, matching the
// even and odd halves of the activation rows.
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4 weights, 0 for NVFP4
//   FP4CL_VEC           vector width, 16 or 8: rows per work-item (common/fp4_dot.cl)
//   GEMM_TILE_M         tokens per work-group (a multiple of GEMM_WI_M)
//   GEMM_TILE_N         weight rows per work-group (a multiple of FP4CL_VEC)
//   GEMM_TILE_K         elements per panel (a multiple of 64)
//   GEMM_WI_M           tokens per work-item
//   GEMM_WI_N           row vectors (of FP4CL_VEC rows) per work-item (default 1)
// Launch: local (GEMM_TILE_N / (FP4CL_VEC · GEMM_WI_N), GEMM_TILE_M / GEMM_WI_M),
//         global (ceil(N / GEMM_TILE_N) · local0, ceil(M / GEMM_TILE_M) · local1).
#include "common/fp4_dot.cl"

#if !defined(GEMM_TILE_M) || !defined(GEMM_TILE_N) || !defined(GEMM_TILE_K) || !defined(GEMM_WI_M)
#error "GEMM_TILE_M, GEMM_TILE_N, GEMM_TILE_K and GEMM_WI_M must be defined"
#endif
#ifndef GEMM_WI_N
#define GEMM_WI_N 1
#endif
#if GEMM_TILE_N % (FP4CL_VEC * GEMM_WI_N) != 0 || GEMM_TILE_K % FP4CL_STEP != 0 || GEMM_TILE_M % GEMM_WI_M != 0
#error "GEMM tile sizes: TILE_N % (FP4CL_VEC * WI_N), TILE_K % 64 and TILE_M % WI_M must be 0"
#endif

#define GEMM_LOCAL_N (GEMM_TILE_N / (FP4CL_VEC * GEMM_WI_N))
#define GEMM_LOCAL_M (GEMM_TILE_M / GEMM_WI_M)
#define GEMM_LOCAL_SIZE (GEMM_LOCAL_N * GEMM_LOCAL_M)

// Stores the FP4CL_VEC values of v at panel[k0 + j][r] (stride GEMM_TILE_N), j = 0..FP4CL_VEC-1.
inline void gemm_store_column(__local float* panel, uint k0, uint r, fp4_floatv v) {
  __local float* p = panel + k0 * GEMM_TILE_N + r;
  p[0 * GEMM_TILE_N] = v.s0; p[1 * GEMM_TILE_N] = v.s1; p[2 * GEMM_TILE_N] = v.s2; p[3 * GEMM_TILE_N] = v.s3;
  p[4 * GEMM_TILE_N] = v.s4; p[5 * GEMM_TILE_N] = v.s5; p[6 * GEMM_TILE_N] = v.s6; p[7 * GEMM_TILE_N] = v.s7;
#if FP4CL_VEC == 16
  p[8 * GEMM_TILE_N] = v.s8;  p[9 * GEMM_TILE_N] = v.s9;  p[10 * GEMM_TILE_N] = v.sa; p[11 * GEMM_TILE_N] = v.sb;
  p[12 * GEMM_TILE_N] = v.sc; p[13 * GEMM_TILE_N] = v.sd; p[14 * GEMM_TILE_N] = v.se; p[15 * GEMM_TILE_N] = v.sf;
#endif
}

__kernel __attribute__((reqd_work_group_size(GEMM_LOCAL_N, GEMM_LOCAL_M, 1)))
void linear_gemm(const __global uchar* restrict codes, const __global uchar* restrict scales,
                 const __global float* restrict x, __global uchar* restrict y,
                 const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad,
                 uint scale_kp, int exp_bias, float epilogue, int has_bias, int out_bf16) {
  __local float panel[GEMM_TILE_K * GEMM_TILE_N];

  const uint lx = get_local_id(0), ly = get_local_id(1);
  const uint lid = ly * GEMM_LOCAL_N + lx;
  const uint n_tile = get_group_id(0) * GEMM_TILE_N;
  const uint m_first = get_group_id(1) * GEMM_TILE_M + ly * GEMM_WI_M;
  const uint half_k = kpad / 2u;

  // This work-item's tokens; rows past the last token repeat it (results discarded; a work-item
  // with none before it computes nothing).
  const __global float* xt[GEMM_WI_M];
  fp4_floatv acc[GEMM_WI_N][GEMM_WI_M];
  #pragma unroll
  for (uint t = 0; t < GEMM_WI_M; ++t) {
    xt[t] = x + (size_t)min(m_first + t, m_tokens - 1u) * kpad;
#pragma unroll
    for (uint v = 0; v < GEMM_WI_N; ++v) acc[v][t] = (fp4_floatv)(0.0f);
  }

  for (uint k0 = 0; k0 < kpad; k0 += GEMM_TILE_K) {
    const uint panel_k = min((uint)GEMM_TILE_K, kpad - k0);  // a multiple of 64
    const uint panel_steps = panel_k / FP4CL_STEP;
    const uint first_step = k0 / FP4CL_STEP;

    // Decode: (row, step) pairs spread over the work-group; rows past N repeat the last row. A
    // weight is stored as e2m1 × block scale (exact).
    for (uint i = lid; i < GEMM_TILE_N * panel_steps; i += GEMM_LOCAL_SIZE) {
      const uint r = i % GEMM_TILE_N, s = i / GEMM_TILE_N;
      const uint n = min(n_tile + r, n_rows - 1u);
      const __global uchar* row = codes + (size_t)n * half_k;
      const uint step = first_step + s;
      const float4 sb = fp4_block_scales(scales, fp4_scale_row_base(n, scale_kp), step, exp_bias);
#pragma unroll
      for (uint c = 0; c < FP4CL_CHUNKS; ++c) {
        const fp4_charv b = fp4_as_charv(fp4_vloadv(step * FP4CL_CHUNKS + c, row));
        const fp4_floatv sc = fp4_chunk_scales(sb, c);
        const uint k_even = s * (FP4CL_STEP / 2) + c * FP4CL_VEC;  // panel row of the chunk's first even element
        gemm_store_column(panel, k_even, r, fp4_low_nibbles(b) * sc);
        gemm_store_column(panel, GEMM_TILE_K / 2 + k_even, r, fp4_high_nibbles(b) * sc);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const __local float* even = panel + lx * FP4CL_VEC * GEMM_WI_N;
    const __local float* odd = panel + (GEMM_TILE_K / 2) * GEMM_TILE_N + lx * FP4CL_VEC * GEMM_WI_N;
    const uint xk = k0 / 2u;
    // Work-items whose tokens all lie past the last one (in the last tile of tokens) skip the
    // FMAs: a call's cost follows its token count, not its count of whole tiles.
    const uint kk_end = m_first < m_tokens ? panel_k / 2u : 0u;
    for (uint kk = 0; kk < kk_end; ++kk) {
      fp4_floatv we[GEMM_WI_N], wo[GEMM_WI_N];
#pragma unroll
      for (uint v = 0; v < GEMM_WI_N; ++v) {
        we[v] = fp4_vloadv(v, even + kk * GEMM_TILE_N);
        wo[v] = fp4_vloadv(v, odd + kk * GEMM_TILE_N);
      }
      #pragma unroll
      for (uint t = 0; t < GEMM_WI_M; ++t) {
        const fp4_floatv xe = (fp4_floatv)(xt[t][xk + kk]), xo = (fp4_floatv)(xt[t][half_k + xk + kk]);
#pragma unroll
        for (uint v = 0; v < GEMM_WI_N; ++v) {
          acc[v][t] = fma(we[v], xe, acc[v][t]);
          acc[v][t] = fma(wo[v], xo, acc[v][t]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#pragma unroll
  for (uint t = 0; t < GEMM_WI_M; ++t) {
    const uint m = m_first + t;
    if (m >= m_tokens) break;
    for (uint v = 0; v < GEMM_WI_N; ++v) {
      const uint n_first = n_tile + (lx * GEMM_WI_N + v) * FP4CL_VEC;
      float vals[FP4CL_VEC];
      fp4_vstorev(acc[v][t], 0, vals);
      for (uint j = 0; j < FP4CL_VEC; ++j) {
        const uint n = n_first + j;
        if (n < n_rows) fp4_store_output(y, (ulong)m * n_rows + n, vals[j], epilogue, bias, has_bias, n, out_bf16);
      }
    }
  }
}
