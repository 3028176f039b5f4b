// FP4 linear, GEMV shape for CPUs with 8-lane SIMD (AVX2; W4A16 there, W4A4 too when forced):
// y[m, n] = x[m, :] · W[n, :].
//
// One work-item owns a group of 8 weight rows as the lanes of float8 vectors (the "words" layout
// with 8 rows in checkpoint nibble order, host/prepare/fp4_words_layout.hpp): one 32-byte load
// brings 8 elements of each of the 8 rows. Element j of a word is decoded by shifts alone, as the
// MoE kernels do (moe_fp4_vec.cl): as_float(((w << (28 - 4j)) >> 6) & 0x81C00000) = e2m1 × 2^-126
// (codes ±0.5 are fp32 subnormals; the strategy needs a device that keeps them), three vector
// instructions per 8 weights and no shuffles, against a byte-table lookup, a sign extension and a
// conversion in gemv_lanes (105 vector instructions per 128 weights there, 84 here). Such weights
// times BF16 activations would be subnormal products, so the activation pre-pass scales each
// 16-element chunk by 2^(126 - E) (E the exponent of its largest magnitude; linear_activations.cl,
// linear_block_scale_bf16): every product is then e2m1 · x · 2^-E, exact and normal (but for
// elements more than ~2^125 below their chunk's largest, whose products may round as subnormals).
// A chunk's 16 products accumulate unscaled in two chains; the chunk sum meets its 8 block scales
// and the chunk's 2^E in one multiply and one FMA.
//
// Measured on 2 AVX2 cores (PoCL 3.1, pthread-haswell, Zen 3), NVFP4 W4A16 M = 1, 4 alternating
// rounds against gemv_lanes, µs: 4096x4096 605, 1080, 694, 639 against 864, 843, 1536, 882;
// 2048x768 67-89 against 85-98. (A probe of this loop on gemv_lanes' data with the activations
// unscaled, i.e. with subnormal products, ran 1.4x slower than gemv_lanes: subnormal results cost
// there; subnormal inputs do not.) Tried, not kept: decoding elements j and j + 4 from one 16-bit
// shift pair (vpsllw, vpsraw; 19 instead of 23 decode instructions per 8 elements): 8 alternating
// rounds within the noise (medians 578-1001 against 593-1062 µs).
//
// Inputs: the words layout (8 rows, checkpoint order) and its block scales; activations as the
// pass writes them: per token KPAD scaled floats, then after max_tokens rows per token KPAD/16
// factors 2^E.
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4 weights, 0 for NVFP4
//   DENORM_TOKENS       tokens per work-item of linear_gemv_denorm_tokens (_single: 1, _pair: 2)
// Launch: global (roundup(ceil(N / 8), local0), ceil(M / tokens)), any local size.
#include "common/fp4_dot.cl"

#ifndef DENORM_TOKENS
#error "DENORM_TOKENS (tokens per work-item) must be defined"
#endif
#if FP4CL_FORMAT_MXFP4
#define DENORM_BLOCK 32
#else
#define DENORM_BLOCK 16
#endif

// Element j (0..7) of each lane's word, as e2m1 × 2^-126.
#define DENORM_E2M1(w, j) as_float8((((w) << (28 - 4 * (j))) >> 6) & (int)0x81C00000)

inline void gemv_denorm(const __global uint* restrict codes, const __global uchar* restrict scales,
                        const __global float* restrict x, __global uchar* restrict y,
                        const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,
                        int exp_bias, float epilogue, int has_bias, int out_bf16, uint max_tokens, const uint tokens) {
  const uint g = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
  if (g * 8u >= n_rows || m0 >= m_tokens) return;
  const uint chunks = k / 16u;
  const __global uint* cp = codes + (size_t)g * (k / 8u) * 8u;
  const __global uchar* sp = scales + (size_t)g * (k / DENORM_BLOCK) * 8u;

  // Token t reads row min(m0 + t, M - 1): a group past the last token repeats it (results dropped).
  const __global float* xr[DENORM_TOKENS];
  const __global float* fr[DENORM_TOKENS];
  float8 acc[DENORM_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    const uint m = min(m0 + t, m_tokens - 1u);
    xr[t] = x + (size_t)m * kpad;
    fr[t] = x + (size_t)max_tokens * kpad + (size_t)m * (kpad / 16u);
    acc[t] = (float8)(0.0f);
  }

  for (uint c = 0; c < chunks; ++c) {
    const int8 w0 = as_int8(vload8(2u * c, cp)), w1 = as_int8(vload8(2u * c + 1u, cp));
    float8 a0[DENORM_TOKENS], a1[DENORM_TOKENS];
    for (uint t = 0; t < tokens; ++t) a0[t] = a1[t] = (float8)(0.0f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float8 d0 = DENORM_E2M1(w0, j), d1 = DENORM_E2M1(w1, j);
      for (uint t = 0; t < tokens; ++t) {
        a0[t] = fma(d0, (float8)(xr[t][16u * c + j]), a0[t]);
        a1[t] = fma(d1, (float8)(xr[t][16u * c + 8u + j]), a1[t]);
      }
    }
    // The 8 rows' block scales (e2m1 × 2^-126 times x × 2^(126 - E): the products carry 2^-E).
    const float8 s = fp4_lane_scales8(sp + (c / (DENORM_BLOCK / 16u)) * 8u, exp_bias, 1.0f);
    for (uint t = 0; t < tokens; ++t) acc[t] = fma((a0[t] + a1[t]) * s, (float8)(fr[t][c]), acc[t]);
  }

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m >= m_tokens) break;
    fp4_store_rows8(y, acc[t], m, g * 8u, n_rows, epilogue, bias, has_bias, out_bf16);
  }
}

#define DENORM_KERNEL(name, tokens)                                                                            \
  __kernel void name(const __global uint* restrict codes, const __global uchar* restrict scales,               \
                     const __global float* restrict x, __global uchar* restrict y,                             \
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,       \
                     int exp_bias, float epilogue, int has_bias, int out_bf16, uint max_tokens) {              \
    gemv_denorm(codes, scales, x, y, bias, n_rows, m_tokens, kpad, k, exp_bias, epilogue, has_bias, out_bf16, \
                max_tokens, tokens);                                                                           \
  }
DENORM_KERNEL(linear_gemv_denorm_single, 1u)
DENORM_KERNEL(linear_gemv_denorm_pair, 2u)
DENORM_KERNEL(linear_gemv_denorm_tokens, DENORM_TOKENS)
