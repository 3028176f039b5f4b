// FP4 linear, GEMV shape for CPUs (decode: few tokens, bandwidth-bound): y[m, n] = x[m, :] · W[n, :].
//
// One work-item owns a group of 8 weight rows as the 8 lanes of float8 vectors (the "lanes"
// layout, host/prepare/fp4_lanes_layout.hpp) and walks the group's codes once, front to back:
// per 16-byte load, 4 elements of each of the 8 rows. The E2M1 codes are decoded through a
// 16-entry table of 2·e2m1 (small integers; a variable-index vector lookup that PoCL compiles to
// one byte shuffle per 16 codes, see fp4_dot.cl) and converted to float once; each element is then
// one FMA with a broadcast activation per token. Products accumulate per 16-element chunk (an
// NVFP4 block or half an MXFP4 one) in two chains, and each chunk sum meets its 8 block scales
// in one FMA.
//
// Why: the "rows" GEMV (linear_gemv.cl) spends about 90 instructions per 64 weights (58 with
// the table decode) on PoCL: its lanes are elements of one row, so every chunk needs its own
// scale vector and an extra multiply, and the split activations are loaded per chunk. Here the
// lanes are rows: a weight costs a share of the decode, a conversion and one FMA, and the
// activations are broadcast scalars (load-port work).
//
// Exactness: table values are integers (2·e2m1), products with the activations (BF16, 8
// significant bits; W4A4 e2m1 × scale, 6 bits) are exact in fp32; chunk sums, the scale FMA and
// the running sum round. NVFP4 scales are E4M3 magnitudes (4 significant bits); MXFP4 scales are
// powers of two relative to the layer's largest (exp_bias), restored by `epilogue`.
//
// Inputs: the lanes layout; activations as "split" fp32 rows of KPAD floats (linear_activations.cl:
// even elements first, then odd ones), so the 4 elements of a load are x_even[j], x_odd[j],
// x_even[j + 1], x_odd[j + 1].
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4 weights, 0 for NVFP4
//   LANES_TOKENS        tokens per work-item of linear_gemv_lanes_tokens (the _single and _pair
//                       kernels have 1 and 2)
// Launch: global (roundup(ceil(N / 8), local0), ceil(M / tokens)), any local size.
#include "common/fp4_dot.cl"

#ifndef LANES_TOKENS
#error "LANES_TOKENS (tokens per work-item) must be defined"
#endif
#if FP4CL_FORMAT_MXFP4
#define LANES_BLOCK 32
#else
#define LANES_BLOCK 16
#endif

// 2·e2m1 of the checkpoint's codes 0..15 (code 8 is -0).
inline char16 lanes_twice_e2m1(uchar16 codes) {
  const char16 t = (char16)(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return fp4_lut16(t, codes);
}

inline void gemv_lanes(const __global uchar* restrict codes, const __global uchar* restrict scales,
                       const __global float* restrict x, __global uchar* restrict y,
                       const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,
                       int exp_bias, float epilogue, int has_bias, int out_bf16, const uint tokens) {
  const uint g = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
  if (g * 8u >= n_rows || m0 >= m_tokens) return;
  const uint chunks = k / 16u;
  const __global uchar* cp = codes + (size_t)g * chunks * 64u;
  const __global uchar* sp = scales + (size_t)g * (k / LANES_BLOCK) * 8u;
  const uint half_k = kpad / 2u;

  // Token t reads row min(m0 + t, M - 1): a group past the last token repeats it (results dropped).
  const __global float* xe[LANES_TOKENS];
  float8 acc[LANES_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    xe[t] = x + (size_t)min(m0 + t, m_tokens - 1u) * kpad;
    acc[t] = (float8)(0.0f);
  }

  for (uint c = 0; c < chunks; ++c) {
    float8 a0[LANES_TOKENS], a1[LANES_TOKENS];
    for (uint t = 0; t < tokens; ++t) a0[t] = a1[t] = (float8)(0.0f);
#pragma unroll
    for (uint q = 0; q < 4; ++q) {
      const uchar16 b = vload16(c * 4u + q, cp);
      const char16 lo = lanes_twice_e2m1(b & (uchar)15), hi = lanes_twice_e2m1(b >> (uchar)4);
      const float8 w0 = convert_float8(lo.lo), w1 = convert_float8(hi.lo);
      const float8 w2 = convert_float8(lo.hi), w3 = convert_float8(hi.hi);
      const uint j = c * 8u + q * 2u;  // index of the load's first element in the even (and odd) half
      for (uint t = 0; t < tokens; ++t) {
        const __global float* xo = xe[t] + half_k;
        a0[t] = fma(w0, (float8)(xe[t][j]), a0[t]);
        a1[t] = fma(w1, (float8)(xo[j]), a1[t]);
        a0[t] = fma(w2, (float8)(xe[t][j + 1u]), a0[t]);
        a1[t] = fma(w3, (float8)(xo[j + 1u]), a1[t]);
      }
    }
    // The 8 rows' block scales, halved (the table holds 2·e2m1).
    const float8 s = fp4_lane_scales8(sp + (c / (LANES_BLOCK / 16u)) * 8u, exp_bias, 0.5f);
    for (uint t = 0; t < tokens; ++t) acc[t] = fma(a0[t] + a1[t], s, acc[t]);
  }

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m >= m_tokens) break;
    fp4_store_rows8(y, acc[t], m, g * 8u, n_rows, epilogue, bias, has_bias, out_bf16);
  }
}

#define LANES_KERNEL(name, tokens)                                                                              \
  __kernel void name(const __global uchar* restrict codes, const __global uchar* restrict scales,               \
                     const __global float* restrict x, __global uchar* restrict y,                              \
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,        \
                     int exp_bias, float epilogue, int has_bias, int out_bf16) {                                \
    gemv_lanes(codes, scales, x, y, bias, n_rows, m_tokens, kpad, k, exp_bias, epilogue, has_bias, out_bf16, \
               tokens);                                                                                         \
  }
LANES_KERNEL(linear_gemv_lanes_single, 1u)
LANES_KERNEL(linear_gemv_lanes_pair, 2u)
LANES_KERNEL(linear_gemv_lanes_tokens, LANES_TOKENS)
