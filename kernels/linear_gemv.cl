// FP4 linear, GEMV shape (decode: few tokens, bandwidth-bound): y[m, n] = x[m, :] · W[n, :].
//
// One work-item owns one weight row and a group of tokens: it walks its row's codes once,
// contiguously, decoding each step of 64 weights once and using them for every token of the group.
// This is what PoCL runs fast (../shared/spec/DEVICES.md): contiguous per-work-item data, explicit
// float16 (FP4CL_VEC) vectors, activations pre-split even/odd, low and high nibbles decoded
// separately with a bit trick, vector accumulators, one horizontal sum at the end.
//
// Per chunk: the even and odd products summed (exact products, one rounding), then one FMA with
// the block scales; a scale multiply per weight is not needed.
//
// Measured on PoCL 3.1 (Zen 3, AVX2, 2 cores shared with other jobs): the loop is bound by
// instructions, not memory: about 90 per 64 weights, of which the E2M1 decode takes 7 per 8
// weights (fp4_dot.cl), giving 3–3.5 GB/s of weights per core whether they stream from DRAM or
// sit in the cache.
//
// Inputs: the "rows" layout and per token a row of KPAD split activations (common/fp4_dot.cl).
// W4A16 and W4A4 both run this kernel; for W4A4 the activations hold their FP4 values times their
// block scales (linear_activations.cl).
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4 weights, 0 for NVFP4
//   FP4CL_VEC           vector width, 16 or 8 (common/fp4_dot.cl)
//   GEMV_TOKENS         tokens per work-item of linear_gemv_tokens (linear_gemv_single has 1,
//                       linear_gemv_pair 2)
// Launch: global (roundup(N, local0), ceil(M / tokens)), any local size.
#include "common/fp4_dot.cl"

#ifndef GEMV_TOKENS
#error "GEMV_TOKENS (tokens per work-item) must be defined"
#endif
#ifndef GEMV_DECODE_LUT
#define GEMV_DECODE_LUT 0
#endif

// The body shared by both kernels; `tokens` is a compile-time constant at each call, so the loops
// over tokens unroll and the accumulators stay in registers.
inline void gemv_rows(const __global uchar* restrict codes, const __global uchar* restrict scales,
                      const __global float* restrict x, __global uchar* restrict y,
                      const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad,
                      uint scale_kp, int exp_bias, float epilogue, int has_bias, int out_bf16,
                      const uint tokens) {
  const uint n = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
  if (n >= n_rows || m0 >= m_tokens) return;
  const __global uchar* row = codes + (size_t)n * (kpad / 2u);
  const uint scale_base = fp4_scale_row_base(n, scale_kp);
  const uint half_k = kpad / 2u;
  const uint steps = kpad / FP4CL_STEP;

  // Token t of the group reads row min(m0 + t, M - 1): a group past the last token repeats it
  // (valid memory, results discarded) rather than branching in the hot loop.
  const __global float* xr[GEMV_TOKENS];
  fp4_floatv acc[GEMV_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    xr[t] = x + (size_t)min(m0 + t, m_tokens - 1u) * kpad;
    acc[t] = (fp4_floatv)(0.0f);
  }

  for (uint s = 0; s < steps; ++s) {
#if GEMV_DECODE_LUT
    const float4 sb = fp4_block_scales(scales, scale_base, s, exp_bias) * 0.5f;  // the table holds 2·e2m1
#else
    const float4 sb = fp4_block_scales(scales, scale_base, s, exp_bias);
#endif
#pragma unroll
    for (uint c = 0; c < FP4CL_CHUNKS; ++c) {
      const uint chunk = s * FP4CL_CHUNKS + c;
#if GEMV_DECODE_LUT
      const fp4_ucharv b = fp4_vloadv(chunk, row);
      const fp4_floatv lo = fp4_twice_low_nibbles_lut(b), hi = fp4_twice_high_nibbles_lut(b);
#else
      const fp4_charv b = fp4_as_charv(fp4_vloadv(chunk, row));
      const fp4_floatv lo = fp4_low_nibbles(b), hi = fp4_high_nibbles(b);
#endif
      const fp4_floatv sc = fp4_chunk_scales(sb, c);
      for (uint t = 0; t < tokens; ++t) {
        const fp4_floatv p = fma(hi, fp4_vloadv(chunk, xr[t] + half_k), lo * fp4_vloadv(chunk, xr[t]));
        acc[t] = fma(p, sc, acc[t]);
      }
    }
  }

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m < m_tokens)
      fp4_store_output(y, (ulong)m * n_rows + n, fp4_hsum(acc[t]), epilogue, bias, has_bias, n, out_bf16);
  }
}

// The three entry points: 1, 2 and GEMV_TOKENS tokens per work-item.
#define GEMV_KERNEL(name, tokens)                                                                            \
  __kernel void name(const __global uchar* restrict codes, const __global uchar* restrict scales,            \
                     const __global float* restrict x, __global uchar* restrict y,                           \
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad,             \
                     uint scale_kp, int exp_bias, float epilogue, int has_bias, int out_bf16) {              \
    gemv_rows(codes, scales, x, y, bias, n_rows, m_tokens, kpad, scale_kp, exp_bias, epilogue, has_bias,     \
              out_bf16, tokens);                                                                             \
  }
GEMV_KERNEL(linear_gemv_single, 1u)
GEMV_KERNEL(linear_gemv_pair, 2u)
GEMV_KERNEL(linear_gemv_tokens, GEMV_TOKENS)
