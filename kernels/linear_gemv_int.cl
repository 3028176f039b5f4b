// FP4 linear W4A4 (and W4A16, below), GEMV shape for CPUs, in integer arithmetic:
// y[m, n] = x[m, :] · W[n, :].
//
// Under W4A4 both operands of every product are E2M1 values, so 2·e2m1(w) · 2·e2m1(a) is an
// integer (|.| <= 144) and a block's sum of products is an exact integer; the block's value is
// that integer times its weight scale times its activation scale, / 4. This kernel computes the
// block sums in integer lanes and converts once per block:
//   - one work-item owns a group of 16 weight rows (the "lanes" layout in its by_quad order,
//     host/prepare/fp4_lanes_layout.hpp): a 32-byte load holds 4 elements of each of the 16 rows,
//     rows 0..7 in the low nibbles and rows 8..15 in the high ones, byte 4r + i element i;
//   - the activations are the pre-pass's int8 codes 2·e2m1 in element order, so the 4 codes of a
//     load are one 32-bit broadcast;
//   - per block, each row's sum goes to float once (exact) and meets weight scale × activation
//     scale / 4 (exact: 4 + 4 significant bits for NVFP4, powers of two for MXFP4) in one FMA into
//     the fp32 sum.
// So every block's contribution is rounded once, as in the float kernels: the reference's error
// bound holds (fp32 accumulation of at most k + 2 terms).
//
// Two ways to the same integers:
//   - x86 with AVX2 (clang's builtins reachable: PoCL on such CPUs; INT_X86 below): the 64 codes
//     of a load, masked (low nibbles) and shifted and masked (high nibbles), become 2·e2m1 + 12
//     (0..24, unsigned) by two byte shuffles (vpshufb), and two vpmaddubsw multiply them by the 4
//     broadcast activation codes and add neighbours: per row two int16 sums of 2 products,
//     accumulated in int16 over the block and added in 32 bits by one vpmaddwd. The
//     offset 12 adds 12 · (the chunk's activation code sum) to every row's sum: the pre-pass
//     writes -12 · that sum, which the kernel adds. |partial sums| <= 2 · 24 · 12 per load, 8 loads an
//     MXFP4 block: no int16 overflow, and vpmaddubsw's saturation is never reached. About 11
//     vector instructions per 64 weights (a load, a shift, two masks, two shuffles, one broadcast,
//     two multiply-adds and their two adds): 80 instructions per 256 weights with the
//     block's epilogue and the loop's control (W4A4 NVFP4, disassembled from PoCL's cache).
//     Groups of 8 rows (a 16-byte load broadcast to both halves, a variable shift and a mask, per
//     32 weights) took 49 per 128, which bounded the loop on Zen 3 (the same speed with the
//     weights warm): a C probe of both loops on one core, warm, 1024x768: 23.7 against 16.4 µs.
//   - elsewhere (and with INT_NO_X86, FP4CL_LINEAR_AVX2=0): signed 2·e2m1 codes from a table,
//     int16 products with the activation codes, summed per row in plain OpenCL C.
//
// W4A16 (INT_PLANES 2): BF16 activations are not small integers, but on a grid of 2^(E - 14) per
// 16-element chunk (linear_activations.cl, linear_bf16_int_planes) they are integers q of 15 bits,
// exact for elements within 2^7 of their chunk's largest and rounded to nearest below that, held
// as two int8 planes q = 128 · hi + lo (lo 0..127). Each load then takes two vpmaddubsw (one per
// plane) into two int16 sums (|.| <= 4 · 2 · 24 · 128 = 24576 over a chunk of 4 loads), which one
// vpmaddwd by 128 and one by 1 add in 32 bits; the chunk's offset -12 · Σq (from the pre-pass) is
// added; the chunk's sum (at most 12 · 2^14 · 16 in magnitude: exact in fp32) meets its two
// factors (a · b = 2^(E - 13), both normal) and the weight scale / 4. One rounding per chunk, as elsewhere; the only other departure
// from the exact product is the activations' rounding to the grid (README, Numerics). On 2 AVX2
// cores (PoCL 3.1, pthread-haswell, Zen 3), NVFP4 W4A16 M = 1, 3 alternating rounds against
// gemv_denorm, µs: 4096x4096 385-446 against 606-651, 2048x768 56-76 against 67-110 (a probe of
// W4A4 with a second plane's multiply-adds ran within the noise of W4A4: memory-bound again).
//
// Inputs: the lanes layout (by_quad), and linear_quantize_fp4_codes's workspace: per token KPAD
// int8 codes 2·e2m1 in element order; after max_tokens rows, per token KPAD/16 ints (each chunk's
// offset -12 · its code sum); from byte 2 · max_tokens · KPAD, per token KPAD/16 fp32 chunk
// scales. W4A16: linear_bf16_int_planes's: the hi plane where the codes are, the offsets -12 · Σq
// where the codes' offsets are, float2 factors where the scales are, and the lo plane from byte
// 3 · max_tokens · KPAD.
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4, 0 for NVFP4
//   INT_TOKENS          tokens per work-item of linear_gemv_int_tokens (_single: 1, _pair: 2)
//   INT_PLANES          1: W4A4 codes; 2: W4A16 activations as two planes (default 1)
//   INT_PREFETCH        64-byte lines of codes ahead to prefetch into L2 (0: none; x86 only; a
//                       chunk of 8 rows' codes before the groups of 16, so the same distance). On
//                       2 AVX2 cores (PoCL 3.1, pthread-haswell), 4096x4096 M = 1, 6 alternating
//                       rounds with groups of 8 rows, median µs: none 426-600, 16 lines 335-495,
//                       32 362-442, 64 341-425 (the CPU default;
//                       bench/pocl-history/amd-epyc-avx2.md).
// Launch: global (roundup(ceil(N / 16), local0), ceil(M / tokens)), any local size.
#include "common/fp4_dot.cl"

#ifndef INT_TOKENS
#error "INT_TOKENS (tokens per work-item) must be defined"
#endif
#ifndef INT_PREFETCH
#define INT_PREFETCH 0
#endif
#ifndef INT_PLANES
#define INT_PLANES 1
#endif
#if INT_PLANES != 1 && INT_PLANES != 2
#error "INT_PLANES must be 1 (W4A4 codes) or 2 (W4A16 planes)"
#endif
#if FP4CL_FORMAT_MXFP4
#define INT_BLOCK 32
#else
#define INT_BLOCK 16
#endif

#if defined(__has_builtin) && !defined(INT_NO_X86) && defined(__AVX2__)
#if __has_builtin(__builtin_ia32_pshufb256) && __has_builtin(__builtin_ia32_pmaddubsw256) && \
    __has_builtin(__builtin_ia32_pmaddwd256)
#define INT_X86 1
#endif
#endif
#ifndef INT_X86
#define INT_X86 0
#endif

#if INT_X86
typedef char int_v32qi __attribute__((vector_size(32)));
typedef short int_v16hi __attribute__((vector_size(32)));
typedef uint int_v8su __attribute__((vector_size(32)));
// A load's 32 bytes (uint8) as 2·e2m1 + 12 of rows 0..7 (its low nibbles: .lo) and rows 8..15
// (its high nibbles: .hi), byte 4r + i element i of row r (r = 0..7).
typedef struct {
  int_v32qi lo, hi;
} int_codes2;
inline int_codes2 int_offset_codes(uint8 b) {
  const int_v32qi table = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                           12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  const int_v8su v = __builtin_astype(b, int_v8su);
  int_codes2 r;
  r.lo = __builtin_ia32_pshufb256(table, (int_v32qi)(v & 0x0F0F0F0Fu));
  r.hi = __builtin_ia32_pshufb256(table, (int_v32qi)((v >> 4) & 0x0F0F0F0Fu));
  return r;
}
inline int_v32qi int_broadcast4(int x4) { return (int_v32qi)((int_v8su){x4, x4, x4, x4, x4, x4, x4, x4}); }
// Row r's int32 lane r: the int16 pair sums of a byte multiply-add, added.
inline int8 int_row_sums(int_v16hi s, short factor) {
  const int_v16hi f = {factor, factor, factor, factor, factor, factor, factor, factor,
                       factor, factor, factor, factor, factor, factor, factor, factor};
  return __builtin_astype(__builtin_ia32_pmaddwd256(s, f), int8);
}
#else
// 2·e2m1 of the checkpoint's codes 0..15 (code 8 is -0).
inline short16 int_twice_e2m1(uchar16 codes) {
  const char16 t = (char16)(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return convert_short16(fp4_lut16(t, codes));
}
// Lanes 4r .. 4r + 3 of v summed, r = 0..3.
inline int4 int_sum_quads(short16 v) {
  return convert_int4(v.s048c) + convert_int4(v.s159d) + convert_int4(v.s26ae) + convert_int4(v.s37bf);
}
inline int4 int_sum_quads32(int16 v) { return v.s048c + v.s159d + v.s26ae + v.s37bf; }
// Half h of a load (16 bytes: rows 4h .. 4h + 3 in the low nibbles, 8 + 4h .. 11 + 4h in the high).
inline uchar16 int_half(const __global uint4* cp, uint load, uint h) { return as_uchar16(cp[2u * load + h]); }
#endif

#if INT_PREFETCH > 0 && defined(__x86_64__)
// The block's weights INT_PREFETCH lines of 64 bytes ahead, into L2, and every 4th block the line
// of scales 32 blocks on. Never faults. (x86 only: other OpenCL compilers, NVIDIA's among them,
// take no __global pointer here; the parameter then changes nothing.)
#define INT_PREFETCH_BLOCK(cp, sp, blk)                                                                   \
  do {                                                                                                    \
    for (uint l_ = 0; l_ < INT_BLOCK / 8u; ++l_)                                                          \
      __builtin_prefetch((const __global char*)(cp) + ((blk) * (INT_BLOCK / 8u) + l_ + INT_PREFETCH) * 64u, 0, 2); \
    if (((blk) & 3u) == 0u) __builtin_prefetch((const __global char*)((sp) + ((blk) + 32u) * 16u), 0, 2); \
  } while (0)
#else
#define INT_PREFETCH_BLOCK(cp, sp, blk) ((void)0)
#endif

inline void gemv_int(const __global uchar* restrict codes, const __global uchar* restrict scales,
                     const __global uchar* restrict acts, __global uchar* restrict y,
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,
                     int exp_bias, float epilogue, int has_bias, int out_bf16, uint max_tokens, const uint tokens) {
  const uint g = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
  if (g * 16u >= n_rows || m0 >= m_tokens) return;
  const uint blocks = k / INT_BLOCK;
  // The group's chunks: 4 loads of 32 bytes (8 uint4) each; its block scales: 16 bytes a block.
  const __global uint4* cp = (const __global uint4*)(codes + (size_t)g * (k / 16u) * 128u);
  const __global uchar* sp = scales + (size_t)g * blocks * 16u;

#if INT_PLANES == 2
  const size_t plane = (size_t)max_tokens * kpad;
  // Token t's planes (4 elements to an int), chunk offsets -12 · Σq and chunk factors.
  const __global int* hi[INT_TOKENS];
  const __global int* lo[INT_TOKENS];
  const __global int* qoff[INT_TOKENS];
  const __global float2* f[INT_TOKENS];
  float16 acc[INT_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    const uint m = min(m0 + t, m_tokens - 1u);  // a group past the last token repeats it (results dropped)
    hi[t] = (const __global int*)(acts + (size_t)m * kpad);
    lo[t] = (const __global int*)(acts + 3u * plane + (size_t)m * kpad);
    qoff[t] = (const __global int*)(acts + plane) + (size_t)m * (kpad / 16u);
    f[t] = (const __global float2*)(acts + 2u * plane) + (size_t)m * (kpad / 16u);
    acc[t] = (float16)(0.0f);
  }
#else
  // Token t's codes (4 to an int), chunk offsets -12 · Σ codes and chunk scales.
  const __global int* a[INT_TOKENS];
  const __global int* aoff[INT_TOKENS];
  const __global float* as[INT_TOKENS];
  float16 acc[INT_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    const uint m = min(m0 + t, m_tokens - 1u);  // a group past the last token repeats it (results dropped)
    a[t] = (const __global int*)(acts + (size_t)m * kpad);
    aoff[t] = (const __global int*)(acts + (size_t)max_tokens * kpad) + (size_t)m * (kpad / 16u);
    as[t] = (const __global float*)(acts + (size_t)max_tokens * kpad * 2u) + (size_t)m * (kpad / 16u);
    acc[t] = (float16)(0.0f);
  }
#endif
  for (uint blk = 0; blk < blocks; ++blk) {
    INT_PREFETCH_BLOCK(cp, sp, blk);
    // The 16 rows' weight scales of the block, divided by 4 (2·e2m1 codes).
    const float16 ws = (float16)(fp4_lane_scales8(sp + blk * 16u, exp_bias, 0.25f),
                                 fp4_lane_scales8(sp + blk * 16u + 8u, exp_bias, 0.25f));
#if INT_PLANES == 2
    // W4A16: the chunk sums of 2·e2m1(w) · q from the two planes (above), chunk by chunk; the
    // factors carry 2^(E - 13).
    for (uint c = blk * (INT_BLOCK / 16u); c < (blk + 1u) * (INT_BLOCK / 16u); ++c) {
      int16 sum[INT_TOKENS];
#if INT_X86
      const int_v16hi zero = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
      // Per token, rows 0..7 and 8..15 against the hi and the lo plane.
      int_v16hi sh0[INT_TOKENS], sh1[INT_TOKENS], sl0[INT_TOKENS], sl1[INT_TOKENS];
      for (uint t = 0; t < tokens; ++t) sh0[t] = sh1[t] = sl0[t] = sl1[t] = zero;
#pragma unroll
      for (uint q = 0; q < 4u; ++q) {
        const int_codes2 w = int_offset_codes(((const __global uint8*)cp)[c * 4u + q]);
        for (uint t = 0; t < tokens; ++t) {
          const int_v32qi h4 = int_broadcast4(hi[t][c * 4u + q]), l4 = int_broadcast4(lo[t][c * 4u + q]);
          sh0[t] += __builtin_ia32_pmaddubsw256(w.lo, h4);
          sh1[t] += __builtin_ia32_pmaddubsw256(w.hi, h4);
          sl0[t] += __builtin_ia32_pmaddubsw256(w.lo, l4);
          sl1[t] += __builtin_ia32_pmaddubsw256(w.hi, l4);
        }
      }
      for (uint t = 0; t < tokens; ++t) {
        const int off = qoff[t][c];
        sum[t] = (int16)(int_row_sums(sh0[t], 128) + int_row_sums(sl0[t], 1) + off,
                         int_row_sums(sh1[t], 128) + int_row_sums(sl1[t], 1) + off);
      }
#else
      // Per token, rows 0..3, 4..7, 8..11 and 12..15.
      int16 s0[INT_TOKENS], s1[INT_TOKENS], s2[INT_TOKENS], s3[INT_TOKENS];
      for (uint t = 0; t < tokens; ++t) s0[t] = s1[t] = s2[t] = s3[t] = (int16)(0);
#pragma unroll
      for (uint q = 0; q < 4u; ++q) {
        const uchar16 b0 = int_half(cp, c * 4u + q, 0u), b1 = int_half(cp, c * 4u + q, 1u);
        const int16 w0 = convert_int16(int_twice_e2m1(b0 & (uchar)15)), w2 = convert_int16(int_twice_e2m1(b0 >> (uchar)4));
        const int16 w1 = convert_int16(int_twice_e2m1(b1 & (uchar)15)), w3 = convert_int16(int_twice_e2m1(b1 >> (uchar)4));
        for (uint t = 0; t < tokens; ++t) {
          const int4 x4 = convert_int4(as_char4(hi[t][c * 4u + q])) * 128 + convert_int4(as_uchar4(lo[t][c * 4u + q]));
          const int16 x = (int16)(x4, x4, x4, x4);
          s0[t] += w0 * x;
          s1[t] += w1 * x;
          s2[t] += w2 * x;
          s3[t] += w3 * x;
        }
      }
      for (uint t = 0; t < tokens; ++t)
        sum[t] = (int16)(int_sum_quads32(s0[t]), int_sum_quads32(s1[t]), int_sum_quads32(s2[t]), int_sum_quads32(s3[t]));
#endif
      for (uint t = 0; t < tokens; ++t) {
        const float2 fc = f[t][c];
        acc[t] = fma(convert_float16(sum[t]) * fc.x, ws * fc.y, acc[t]);
      }
    }
#else
    int16 sum[INT_TOKENS];
#if INT_X86
    const int_v16hi zero = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    // Per token, rows 0..7 and 8..15.
    int_v16hi s0[INT_TOKENS], s1[INT_TOKENS];
    for (uint t = 0; t < tokens; ++t) s0[t] = s1[t] = zero;
#pragma unroll
    for (uint q = 0; q < INT_BLOCK / 4u; ++q) {
      const int_codes2 w = int_offset_codes(((const __global uint8*)cp)[blk * (INT_BLOCK / 4u) + q]);
      for (uint t = 0; t < tokens; ++t) {
        const int_v32qi x4 = int_broadcast4(a[t][blk * (INT_BLOCK / 4u) + q]);
        s0[t] += __builtin_ia32_pmaddubsw256(w.lo, x4);
        s1[t] += __builtin_ia32_pmaddubsw256(w.hi, x4);
      }
    }
    for (uint t = 0; t < tokens; ++t) {
#if FP4CL_FORMAT_MXFP4
      const int offset = aoff[t][2u * blk] + aoff[t][2u * blk + 1u];
#else
      const int offset = aoff[t][blk];
#endif
      sum[t] = (int16)(int_row_sums(s0[t], 1), int_row_sums(s1[t], 1)) + offset;
    }
#else
    // Per token, rows 0..3, 4..7, 8..11 and 12..15.
    short16 s0[INT_TOKENS], s1[INT_TOKENS], s2[INT_TOKENS], s3[INT_TOKENS];
    for (uint t = 0; t < tokens; ++t) s0[t] = s1[t] = s2[t] = s3[t] = (short16)(0);
#pragma unroll
    for (uint q = 0; q < INT_BLOCK / 4u; ++q) {
      const uchar16 b0 = int_half(cp, blk * (INT_BLOCK / 4u) + q, 0u), b1 = int_half(cp, blk * (INT_BLOCK / 4u) + q, 1u);
      const short16 w0 = int_twice_e2m1(b0 & (uchar)15), w2 = int_twice_e2m1(b0 >> (uchar)4);
      const short16 w1 = int_twice_e2m1(b1 & (uchar)15), w3 = int_twice_e2m1(b1 >> (uchar)4);
      for (uint t = 0; t < tokens; ++t) {
        const short4 x4 = convert_short4(as_char4(a[t][blk * (INT_BLOCK / 4u) + q]));
        const short16 x = (short16)(x4, x4, x4, x4);
        s0[t] += w0 * x;
        s1[t] += w1 * x;
        s2[t] += w2 * x;
        s3[t] += w3 * x;
      }
    }
    for (uint t = 0; t < tokens; ++t)
      sum[t] = (int16)(int_sum_quads(s0[t]), int_sum_quads(s1[t]), int_sum_quads(s2[t]), int_sum_quads(s3[t]));
#endif
    for (uint t = 0; t < tokens; ++t)
      acc[t] = fma(convert_float16(sum[t]), ws * as[t][blk * (INT_BLOCK / 16u)], acc[t]);
#endif
  }

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m >= m_tokens) break;
    fp4_store_rows16(y, acc[t], m, g * 16u, n_rows, epilogue, bias, has_bias, out_bf16);
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
