// Tiles of few pairs by integer dot products (MOE_INTDOT) on 8-lane CPU vectors: a part of
// moe_fp4_vec.cl, included by it where its few-pair loop shape (MOE_FEW_DOT_N, MOE_FEW_DOT2_N),
// prefetch (MOE_PREFETCH8_AT), block scales (moe_block_scales, MOE_STEP_SCALE) and E2M1 decode
// (MOE_E2M1_EXP) are defined; not a kernel file of its own.
#ifndef FP4CL_MOE_INT_DOT_CL
#define FP4CL_MOE_INT_DOT_CL

// Tiles of few pairs by exact integer dot products (MOE_INTDOT): W4A4 on 8-lane CPU vectors
// (MOE_VEC = MOE_GROUP = 8, AVX2). Under W4A4 both operands of every product are E2M1 values, so
// with 2·e2m1 codes a block's sum of products is an exact integer (|.| <= 16 · 144); the block's
// value is that integer times its weight scale times its activation scale / 4, rounded once, as
// the float decode rounds each block sum once (FP4.md's error bound holds the same way). Blocks
// here are steps of 16 elements: an MXFP4 block of 32 is two, each with the block's scales. The
// host defines MOE_INT_CODES (host/kernels/moe_build_options.cpp: CPU devices, W4A4, the 8-lane
// layout; FP4CL_MOE_INT_DOT=0 turns it off), and then the activations' producers write, beside x1
// and x2, each row's integer form into x1q / x2q (moe_int_store_codes16, below): per row of K
// elements (2K bytes), K int8 codes 2·e2m1 with each 8 elements ordered (0, 2, 4, 6, 1, 3, 5, 7);
// from byte K, K/16 ints, each step's offset -12 · (its code sum); from byte K + K/4, K/16
// floats, each step's decoded scale.
//   - x86 with AVX2 (clang's builtins reachable; not with MOE_INT_NO_X86, FP4CL_MOE_INT_DOT=portable):
//     a vector of 8 words (8 elements of each of the 8 rows) gives its even and odd elements as
//     bytes (a mask, a shift and a mask), one vpshufb each maps them to 2·e2m1 + 12 (0..24,
//     unsigned), and one vpmaddubsw each multiplies them by a 32-bit broadcast of the pair's 4
//     matching codes and adds neighbours: per row two int16 sums, accumulated over the block (|.|
//     <= 4 · 2 · 24 · 12: no overflow, no saturation) and added in 32 bits by one vpmaddwd; the
//     offset 12 adds 12 · the block's code sum, which the block's precomputed offset takes away.
//     About 9 vector instructions per 64 weights and pair, against ~40 for the float decode (5 per
//     8 weights).
//   - elsewhere: the same integers from a select decode and int multiplies in plain OpenCL C.
// Tiles of up to MOE_INT_MAX_PAIRS pairs; larger tiles and batch-invariant builds keep the float
// decode (a pair's bits would otherwise depend on its tile's size).
// W4A16 takes the same loops with MOE_INT_PLANES instead of MOE_INT_CODES (host: CPU devices
// that keep fp32 denormals, the 8-lane layout, FP4CL_W4A16_INT not 0): BF16 activations are not
// small integers, but on a grid per chunk they are (moe_int_planes.cl), two planes of int8 a row,
// and each load takes two vpmaddubsw, one a plane. Measured on 2 AVX2 cores (PoCL 3.1, Zen 3),
// qwen3-30b-a3b NVFP4 W4A16, 2 alternating rounds against the scaled activations (MOE_SCALEDX),
// µs: T = 1 1414, 1356 against 1140, 1169; T = 8 11414, 10964 against 10398, 7649 (the entries
// tuned for the scaled activations in both). MXFP4, until then the float decode, on the same
// machine: see bench/pocl-history/amd-epyc-avx2.md (2026-12-05).
#if (defined(MOE_INT_CODES) || defined(MOE_INT_PLANES)) && MOE_VEC == 8 && MOE_GROUP == 8 && \
    !defined(MOE_BATCH_INVARIANT)
#define MOE_INTDOT 1
#define MOE_INT_MAX_PAIRS 4
// The weight scales of step b of 16 elements for sums of 2·e2m1 codes: the float decode's block
// scales × 2^(MOE_E2M1_EXP - 2). NVFP4 through the exponent: e4m3 × 2^-9 (scale_exp 119, the
// subnormal decode) or × 2^-2 (the exact decode), normal for every E4M3 value. MXFP4: the E8M0
// scale e, which the block's two steps share, as 2^(e + scale_exp - 127 + MOE_E2M1_EXP - 2) built
// in integer lanes (moe_int_mx_wscales): exact, a subnormal where it must be one (scales below
// 2^-124: e + scale_exp < 129 under the subnormal decode, whose scale_exp is 126 wherever the
// layer's scales are at most 2), 0 below 2^-149; no fp32 operation meets a subnormal on the way.
#ifdef MOE_NVFP4
#define MOE_INT_WSCALES(s, b) moe_block_scales((s) + (b) * MOE_GROUP, scale_exp + MOE_E2M1_EXP - 2)
#else
inline float8 moe_int_mx_wscales(const __global uchar* p, int scale_exp) {
  const int8 t = convert_int8(vload8(0, p)) + (scale_exp + MOE_E2M1_EXP - 2);  // the biased exponent
  // Below 2^-126: 2^(t - 127) = 2^-149 · 2^(t + 22), one significand bit.
  const int8 sub = select((int8)(0), (int8)(1) << clamp(t + 22, 0, 22), t >= -22);
  return as_float8(select(sub, t << 23, t >= 1));
}
#define MOE_INT_WSCALES(s, b) moe_int_mx_wscales((s) + MOE_STEP_SCALE(b) * MOE_GROUP, scale_exp)
#endif
#if defined(__has_builtin) && !defined(MOE_INT_NO_X86) && defined(__AVX2__)
#if __has_builtin(__builtin_ia32_pshufb256) && __has_builtin(__builtin_ia32_pmaddubsw256) && \
    __has_builtin(__builtin_ia32_pmaddwd256)
#define MOE_INT_X86 1
#endif
#endif
#ifndef MOE_INT_X86
#define MOE_INT_X86 0
#endif

// W4A16 (MOE_INT_PLANES): BF16 activations as integers on a grid per chunk, in two int8
// planes (moe_int_planes.cl; README, Numerics): per 8 words, two vpmaddubsw a plane; per chunk one
// vpmaddwd by 128 and one by 1, the chunk's offset added, and the sum meets the chunk's factor.
// FC1's inputs come in chunks of 16 (a step), FC2's in chunks of 8. Uints per input row of FC1
// (MOE_INT_ROW1) and FC2 (MOE_INT_ROW2):
#include "moe_int_planes.cl"
#ifdef MOE_INT_PLANES
#define MOE_INT_ROW1(kk) MOE_IP_ROW(kk, 16)
#define MOE_INT_ROW2(kk) MOE_IP_ROW(kk, 8)
#else
#define MOE_INT_ROW1(kk) ((kk) / 2)
#define MOE_INT_ROW2(kk) ((kk) / 2)
#endif

// Row m's codes, block offsets (-12 · code sum) and block scales (x: the row's first uint, kk its elements).
#define MOE_INT_OFFSETS(x, kk) ((const __global int*)((const __global char*)(x) + (kk)))
#define MOE_INT_SCALES(x, kk) ((const __global float*)((const __global char*)(x) + (kk) + (kk) / 4))

#if MOE_INT_X86
typedef char moe_v32qi __attribute__((vector_size(32)));
typedef short moe_v16hi_i __attribute__((vector_size(32)));
typedef uint moe_v8su __attribute__((vector_size(32)));
// 2·e2m1 + 12 of the low nibble of each byte of v (the high nibble must be 0).
inline moe_v32qi moe_int_offset_codes(moe_v8su v) {
  const moe_v32qi table = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                           12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  return __builtin_ia32_pshufb256(table, (moe_v32qi)v);
}
inline moe_v16hi_i moe_int_madd(moe_v32qi w, uint x4) {
  return __builtin_ia32_pmaddubsw256(w, (moe_v32qi)((moe_v8su){x4, x4, x4, x4, x4, x4, x4, x4}));
}
#else
// 2·e2m1 of nibble j of each lane's word.
inline int8 moe_int_twice_e2m1(uint8 w, int j) {
  const int8 c = convert_int8((w >> (uint)(4 * j)) & 15u), e = (c >> 1) & 3, mant = c & 1;
  const int8 mag = select((2 + mant) << max(e - 1, 0), mant, e == 0);
  return select(mag, -mag, (c & 8) != 0);
}
#endif

// Σ_k w[row, k] · x_m[k] of the 8 rows of a work-item for N pairs m (x_m: the integer form of row
// min(m, count - 1) of xq, rows kk / 2 uints apart), scaled as the float decode's sums (block
// scales × 2^(scale_exp + MOE_E2M1_EXP - 2): the codes are 2·e2m1 on both sides). Each pair's
// blocks meet its scales in one FMA chain in block order, whatever N is.
#define MOE_INT_ROWS(N)                                                                          \
  const __global uint* xr[N];                                                                    \
  _Pragma("unroll") for (int m = 0; m < (N); ++m) xr[m] = xq + (long)min(m, count - 1) * ((kk) / 2);

#if MOE_INT_X86
#define MOE_INT_BLOCK_SUMS(W, S16, N)                                                            \
  {                                                                                              \
    const moe_v16hi_i zero16 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};                 \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) S16[m] = zero16;                             \
    _Pragma("unroll") for (int q = 0; q < 2; ++q) {                                              \
      const uint8 word = vload8(0, (W) + (long)(2 * b + q) * MOE_GROUP);                         \
      const moe_v8su wv = __builtin_astype(word, moe_v8su);                                      \
      const moe_v32qi ev = moe_int_offset_codes(wv & 0x0F0F0F0Fu);                               \
      const moe_v32qi od = moe_int_offset_codes((wv >> 4) & 0x0F0F0F0Fu);                        \
      _Pragma("unroll") for (int m = 0; m < (N); ++m) S16[m] +=                                  \
          moe_int_madd(ev, xr[m][4 * b + 2 * q]) + moe_int_madd(od, xr[m][4 * b + 2 * q + 1]);   \
    }                                                                                            \
  }
#define MOE_INT_BLOCK_TOTAL(S16, m)                                                              \
  (__builtin_astype(__builtin_ia32_pmaddwd256(S16[m], (moe_v16hi_i){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), \
                    int8) + MOE_INT_OFFSETS(xr[m], kk)[b])
#define MOE_INT_SUM_T moe_v16hi_i
#else
#define MOE_INT_BLOCK_SUMS(W, S16, N)                                                            \
  {                                                                                              \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) S16[m] = (int8)(0);                          \
    _Pragma("unroll") for (int q = 0; q < 2; ++q) {                                              \
      const uint8 word = vload8(0, (W) + (long)(2 * b + q) * MOE_GROUP);                         \
      _Pragma("unroll") for (int j = 0; j < 8; ++j) {                                            \
        const int8 wj = moe_int_twice_e2m1(word, j);                                             \
        _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                        \
          const char4 x4 = as_char4(xr[m][4 * b + 2 * q + (j & 1)]);                             \
          const int xj = (j >> 1) == 0 ? x4.s0 : (j >> 1) == 1 ? x4.s1 : (j >> 1) == 2 ? x4.s2 : x4.s3; \
          S16[m] += wj * xj;                                                                     \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
  }
#define MOE_INT_BLOCK_TOTAL(S16, m) (S16[m])
#define MOE_INT_SUM_T int8
#endif

#ifdef MOE_INT_PLANES
// W4A16: the sums of 2·e2m1(w) · q over words 2b + q0 .. 2b + q1 - 1 (each 8 elements of the 8 rows)
// for the N pairs into S[m] (int8, 8 rows; C: the rows' chunk size, their planes xr and xl).
#if MOE_INT_X86
#define MOE_IP_SPLAT16(v) ((moe_v16hi_i){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v})
#define MOE_IP_SUMS(W, q0, q1, S, N, C, c)                                                       \
  {                                                                                              \
    moe_v16hi_i sh[N], sl[N];                                                                    \
    _Pragma("unroll") for (int q = (q0); q < (q1); ++q) {                                        \
      const moe_v8su wv = __builtin_astype(vload8(0, (W) + (long)(2 * b + q) * MOE_GROUP), moe_v8su); \
      const moe_v32qi ev = moe_int_offset_codes(wv & 0x0F0F0F0Fu);                               \
      const moe_v32qi od = moe_int_offset_codes((wv >> 4) & 0x0F0F0F0Fu);                        \
      _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                          \
        const moe_v16hi_i h = moe_int_madd(ev, xr[m][4 * b + 2 * q]) + moe_int_madd(od, xr[m][4 * b + 2 * q + 1]); \
        const moe_v16hi_i l = moe_int_madd(ev, xl[m][4 * b + 2 * q]) + moe_int_madd(od, xl[m][4 * b + 2 * q + 1]); \
        sh[m] = q == (q0) ? h : sh[m] + h;                                                       \
        sl[m] = q == (q0) ? l : sl[m] + l;                                                       \
      }                                                                                          \
    }                                                                                            \
    _Pragma("unroll") for (int m = 0; m < (N); ++m)                                              \
      S[m] = __builtin_astype(__builtin_ia32_pmaddwd256(sh[m], MOE_IP_SPLAT16(128)), int8) +     \
             __builtin_astype(__builtin_ia32_pmaddwd256(sl[m], MOE_IP_SPLAT16(1)), int8) +       \
             MOE_IP_OFFSETS(xr[m], kk, C)[c];                                                    \
  }
#else
#define MOE_IP_SUMS(W, q0, q1, S, N, C, c)                                                       \
  {                                                                                              \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) S[m] = (int8)(0);                            \
    _Pragma("unroll") for (int q = (q0); q < (q1); ++q) {                                        \
      const uint8 word = vload8(0, (W) + (long)(2 * b + q) * MOE_GROUP);                         \
      _Pragma("unroll") for (int j = 0; j < 8; ++j) {                                            \
        const int8 wj = moe_int_twice_e2m1(word, j);                                             \
        _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                        \
          const char4 h4 = as_char4(xr[m][4 * b + 2 * q + (j & 1)]);                             \
          const uchar4 l4 = as_uchar4(xl[m][4 * b + 2 * q + (j & 1)]);                           \
          const int i = j >> 1;                                                                  \
          const int hj = i == 0 ? h4.s0 : i == 1 ? h4.s1 : i == 2 ? h4.s2 : h4.s3;               \
          const int lj = i == 0 ? l4.s0 : i == 1 ? l4.s1 : i == 2 ? l4.s2 : l4.s3;               \
          S[m] += wj * (128 * hj + lj);                                                          \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
  }
#endif
#define MOE_IP_ROWS(N, C)                                                                        \
  const __global uint* xr[N];                                                                    \
  const __global uint* xl[N];                                                                    \
  _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                              \
    xr[m] = xq + (long)min(m, count - 1) * MOE_IP_ROW(kk, C);                                    \
    xl[m] = MOE_IP_LO(xr[m], kk, C);                                                             \
  }
// Chunk c's sums S[m] into acc[m], times the block's weight scales ws and the chunk's factor.
#define MOE_IP_ACC(S, ws, acc, C, c, N)                                                          \
  _Pragma("unroll") for (int m = 0; m < (N); ++m)                                                \
    acc[m] = fma(convert_float8(S[m]), (ws) * MOE_IP_FACTORS(xr[m], kk, C)[c], acc[m]);

// Block b: FC2's inputs in chunks of 8 (two a block), FC1's in chunks of 16 (one a block).
#define MOE_IP_BLOCK8(w, s, acc, N)                                                              \
  {                                                                                              \
    const float8 ws = MOE_INT_WSCALES(s, b);                                                     \
    int8 t0[N], t1[N];                                                                           \
    MOE_IP_SUMS(w, 0, 1, t0, N, 8, 2 * b)                                                        \
    MOE_IP_SUMS(w, 1, 2, t1, N, 8, 2 * b + 1)                                                    \
    MOE_IP_ACC(t0, ws, acc, 8, 2 * b, N)                                                         \
    MOE_IP_ACC(t1, ws, acc, 8, 2 * b + 1, N)                                                     \
  }
#define MOE_IP_BLOCK16(w, s, acc, N)                                                             \
  {                                                                                              \
    const float8 ws = MOE_INT_WSCALES(s, b);                                                     \
    int8 t[N];                                                                                   \
    MOE_IP_SUMS(w, 0, 2, t, N, 16, b)                                                            \
    MOE_IP_ACC(t, ws, acc, 16, b, N)                                                             \
  }
#define MOE_IP_ROWS8(N) MOE_IP_ROWS(N, 8)
#define MOE_IP_ROWS16(N) MOE_IP_ROWS(N, 16)
#define MOE_INT_DOT_N(NAME, N) MOE_FEW_DOT_N(NAME, N, MOE_IP_ROWS8, MOE_IP_BLOCK8)
#define MOE_INT_DOT2_N(NAME, N) MOE_FEW_DOT2_N(NAME, N, MOE_IP_ROWS16, MOE_IP_BLOCK16)
#else
// Block b (W4A4): one exact integer sum per row and pair, times the block's weight and activation scales.
#define MOE_INT_BLOCK(w, s, acc, N)                                                              \
  {                                                                                              \
    MOE_INT_SUM_T s16[N];                                                                        \
    MOE_INT_BLOCK_SUMS(w, s16, N)                                                                \
    const float8 ws = MOE_INT_WSCALES(s, b);                                                     \
    _Pragma("unroll") for (int m = 0; m < (N); ++m)                                              \
      acc[m] = fma(convert_float8(MOE_INT_BLOCK_TOTAL(s16, m)), ws * MOE_INT_SCALES(xr[m], kk)[b], acc[m]); \
  }
#define MOE_INT_DOT_N(NAME, N) MOE_FEW_DOT_N(NAME, N, MOE_INT_ROWS, MOE_INT_BLOCK)
#define MOE_INT_DOT2_N(NAME, N) MOE_FEW_DOT2_N(NAME, N, MOE_INT_ROWS, MOE_INT_BLOCK)
#endif  // MOE_INT_PLANES
#else
#define MOE_INTDOT 0
#define MOE_INT_MAX_PAIRS 0
#endif
#endif  // FP4CL_MOE_INT_DOT_CL
