// FP4 linear W4A4, GEMV shape for CPUs, in integer arithmetic: y[m, n] = x[m, :] · W[n, :].
//
// Under W4A4 both operands of every product are E2M1 values, so 2·e2m1(w) · 2·e2m1(a) is an
// integer (|.| <= 144) and a block's sum of products is an exact integer; the block's value is
// that integer times its weight scale times its activation scale, / 4. This kernel computes the
// block sums in 16-bit integer lanes (on AVX2, pairs summed into 32-bit lanes by vpmaddwd: below)
// and converts once per block:
//   - one work-item owns a group of 8 weight rows (the "lanes" layout in its by_pair order,
//     host/prepare/fp4_lanes_layout.hpp): a 16-byte load holds 4 elements of each of the 8 rows;
//     a table lookup of its low nibbles (one byte shuffle on PoCL, fp4_dot.cl) gives the
//     (element, next element) pairs of the 8 rows, the high nibbles the next two elements;
//   - sign-extended to int16, each pair is multiplied by the activations' pair (one 32-bit
//     broadcast of two int16 codes) and summed into int16 accumulators (|sum| <= 16 · 144 per
//     NVFP4 block, 32 · 144 per MXFP4 block: no overflow);
//   - per block, the pair halves are added in 32 bits, converted to float (exact) and meet
//     weight scale × activation scale / 4 (exact: 4 + 4 significant bits for NVFP4, powers of two
//     for MXFP4) in one FMA into the fp32 sum.
// So every block's contribution is rounded once, as in the float kernels: the reference's error
// bound holds (fp32 accumulation of at most k + 2 terms).
//
// Inputs: the lanes layout (by_pair), and linear_quantize_fp4_codes's workspace: per token KPAD
// int16 codes 2·e2m1 in element order, then (after max_tokens rows) per token KPAD/16 fp32 chunk
// scales.
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4, 0 for NVFP4
//   INT_TOKENS          tokens per work-item of linear_gemv_int_tokens (_single: 1, _pair: 2)
// Launch: global (roundup(ceil(N / 8), local0), ceil(M / tokens)), any local size.
#include "common/fp4_dot.cl"

#ifndef INT_TOKENS
#error "INT_TOKENS (tokens per work-item) must be defined"
#endif
#if FP4CL_FORMAT_MXFP4
#define INT_BLOCK 32
#else
#define INT_BLOCK 16
#endif

// 2·e2m1 of the checkpoint's codes 0..15 (code 8 is -0).
inline short16 int_twice_e2m1(uchar16 codes) {
  const char16 t = (char16)(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return convert_short16(fp4_lut16(t, codes));
}

// x86 with AVX2 (clang's builtin reachable: PoCL on such CPUs): each row's (element, next
// element) products summed in 32 bits by one vpmaddwd per 16 products, instead of two int16
// multiplies and adds, with the even/odd halves added once per block. The same exact integer
// sums. Measured on 2 AVX2 cores (PoCL 3.1, pthread-haswell), linear 4096x4096 W4A4 M = 1, 4
// alternating rounds, µs: 611, 683, 1109, 655 -> 511, 662, 490, 482; 2048x768 within the noise
// (58-94 against 72-85). (Written as plain OpenCL C, `convert_int8(w.even) * ... + ...odd`, LLVM
// did not form vpmaddwd and it ran 2.5x slower.)
#if defined(__has_builtin) && !defined(INT_NO_PMADDWD)
#if __has_builtin(__builtin_ia32_pmaddwd256) && defined(__AVX2__)
#define INT_PMADDWD 1
#endif
#endif
#ifndef INT_PMADDWD
#define INT_PMADDWD 0
#endif
#if INT_PMADDWD
typedef short int_v16hi __attribute__((vector_size(32)));
inline int8 int_madd(short16 w, short16 x) {
  return __builtin_astype(__builtin_ia32_pmaddwd256(__builtin_astype(w, int_v16hi), __builtin_astype(x, int_v16hi)),
                          int8);
}
#endif

inline void gemv_int(const __global uchar* restrict codes, const __global uchar* restrict scales,
                     const __global uchar* restrict acts, __global uchar* restrict y,
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,
                     int exp_bias, float epilogue, int has_bias, int out_bf16, uint max_tokens, const uint tokens) {
  const uint g = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
  if (g * 8u >= n_rows || m0 >= m_tokens) return;
  const uint blocks = k / INT_BLOCK;
  const __global uchar* cp = codes + (size_t)g * (k / 16u) * 64u;
  const __global uchar* sp = scales + (size_t)g * blocks * 8u;

  // Token t's codes as int16 pairs (one int each), and its chunk scales.
  const __global int* a[INT_TOKENS];
  const __global float* as[INT_TOKENS];
  float8 acc[INT_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    const uint m = min(m0 + t, m_tokens - 1u);  // a group past the last token repeats it (results dropped)
    a[t] = (const __global int*)acts + (size_t)m * (kpad / 2u);
    as[t] = (const __global float*)(acts + (size_t)max_tokens * kpad * 2u) + (size_t)m * (kpad / 16u);
    acc[t] = (float8)(0.0f);
  }

  for (uint blk = 0; blk < blocks; ++blk) {
#if INT_PMADDWD
    int8 s[INT_TOKENS];
    for (uint t = 0; t < tokens; ++t) s[t] = (int8)(0);
#else
    short16 s[INT_TOKENS];
    for (uint t = 0; t < tokens; ++t) s[t] = (short16)(0);
#endif
#pragma unroll
    for (uint q = 0; q < INT_BLOCK / 4u; ++q) {
      const uchar16 b = vload16(blk * (INT_BLOCK / 4u) + q, cp);
      const short16 w01 = int_twice_e2m1(b & (uchar)15), w23 = int_twice_e2m1(b >> (uchar)4);
      const uint j = blk * (INT_BLOCK / 2u) + q * 2u;  // the int holding elements 4q, 4q + 1 of the block
      for (uint t = 0; t < tokens; ++t) {
#if INT_PMADDWD
        s[t] += int_madd(w01, as_short16((int8)(a[t][j]))) + int_madd(w23, as_short16((int8)(a[t][j + 1u])));
#else
        s[t] += w01 * as_short16((int8)(a[t][j])) + w23 * as_short16((int8)(a[t][j + 1u]));
#endif
      }
    }
    // The 8 rows' weight scales of the block, divided by 4 (both tables hold 2·e2m1).
    const float8 ws = fp4_lane_scales8(sp + blk * 8u, exp_bias, 0.25f);
    for (uint t = 0; t < tokens; ++t) {
#if INT_PMADDWD
      const int8 sum = s[t];
#else
      const int8 sum = convert_int8(s[t].even) + convert_int8(s[t].odd);
#endif
      acc[t] = fma(convert_float8(sum), ws * as[t][blk * (INT_BLOCK / 16u)], acc[t]);
    }
  }

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m >= m_tokens) break;
    fp4_store_rows8(y, acc[t], m, g * 8u, n_rows, epilogue, bias, has_bias, out_bf16);
  }
}

#define INT_KERNEL(name, tokens)                                                                                  \
  __kernel void name(const __global uchar* restrict codes, const __global uchar* restrict scales,                 \
                     const __global uchar* restrict acts, __global uchar* restrict y,                             \
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,          \
                     int exp_bias, float epilogue, int has_bias, int out_bf16, uint max_tokens) {                 \
    gemv_int(codes, scales, acts, y, bias, n_rows, m_tokens, kpad, k, exp_bias, epilogue, has_bias, out_bf16,     \
             max_tokens, tokens);                                                                                 \
  }
INT_KERNEL(linear_gemv_int_single, 1u)
INT_KERNEL(linear_gemv_int_pair, 2u)
INT_KERNEL(linear_gemv_int_tokens, INT_TOKENS)
