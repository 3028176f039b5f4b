// FP4 linear, GEMV shape for CPUs with 16-lane float vectors (decode: few tokens):
// y[m, n] = x[m, :] · W[n, :].
//
// One work-item owns a group of 16 weight rows as the 16 lanes of float16 vectors (the "words"
// layout, host/prepare/fp4_words_layout.hpp): one 64-byte load brings a 32-bit word of each row,
// the row's 8 consecutive elements 8g .. 8g+7 in pair order (element 8g + 2p in bits 4p .. 4p+3,
// element 8g + 2p + 1 in bits 4p+16 .. 4p+19; WORDS_SHIFT). Element j of the 16 rows is decoded
// by one lookup in a 16-entry float16 table of the E2M1 values, indexed by (word >> WORDS_SHIFT(j))
// & 15: a variable-index vector lookup that LLVM compiles to one vpermps on AVX-512 (see
// words_lut); the activation is a broadcast scalar folded into the FMA. Per 16 weights: a shift,
// a mask, a permute and an FMA. The products of a 16-element chunk accumulate in FMA chains and
// meet the rows' block scales once per chunk.
//
// Why (measured on PoCL 3.1, Zen 4 with AVX-512, 2 cores): the "lanes" GEMV (8 rows per
// work-item, byte-table decode) spends 19 vector instructions per 32 weights on 8-lane vectors
// (table lookup, two sign extensions, two conversions and two FMAs per 16 codes); this loop
// spends about 4.3 per 16 weights on 16-lane vectors.
//
// Exactness: table values are E2M1 values (2 significant bits); products with the activations
// (BF16: 8 bits; W4A4 e2m1 × E4M3 scale: 6 bits) are exact in fp32; chunk sums, the scale FMA and
// the running sum round, as in the other GEMVs.
//
// Inputs: the words layout; activations as "split" fp32 rows of KPAD floats (linear_activations.cl:
// even elements first, then odd ones): element 8g + j is x_even[4g + j/2] (j even) or
// x_odd[4g + j/2] (j odd). W4A16 and W4A4 both run this kernel; for W4A4 the activations hold
// their FP4 values times their block scales.
//
// W4A16 can skip the pre-pass (WORDS_BF16_X = 1): x is then the layer's BF16 input [M, K] itself,
// and each work-group first converts its tokens' rows to fp32 in element order into local memory
// (`xl`, tokens × K floats: 3 vector instructions per 16 activations, against about 70 per 16
// weights of each of the group's 16 rows), which saves the pre-pass launch and its wait.
//
// BF16 dot products (WORDS_BF16DOT, common/bf16_dot.cl): on CPUs with AVX-512 BW, VBMI and BF16
// (the host defines FP4_DPBF16, host/kernels/linear_gemv_words.cpp) the chunk loop below runs as
// words_bf16_dot_*: per element pair (2p, 2p + 1) of a word vector a vpsrld by 4p (none for
// p = 0) and a vpermw (both shared by the tokens; fp4_bf16_quad_pair: pair order puts the pair in
// nibbles p and p + 4) and one vdpbf16ps per token, at most 3 vector instructions per 32 weights
// and token instead of about 4.3 per 16 (the checkpoint's order took a vpmultishiftqb per pair).
// The activations' BF16 pairs are the 32-bit words of BF16 rows themselves
// (WORDS_BF16_X: the W4A16 input, or W4A4's e2m1 × scale values, exact in BF16, as the pre-pass
// writes them for this kernel), read from global memory (no conversion into `xl`); split fp32
// rows (a K too large for `xl`) keep the fp32 loop. A chunk's 8 pair steps alternate between two sums, which meet the 16 rows' block scales once per chunk
// as below (the scales are per row and block, so they cannot be folded into the broadcast
// activations; folding them into the weights would need a table per row). If a token of the
// work-item has a nonzero activation below 2^-100 in magnitude (vdpbf16ps flushes denormals),
// the work-item computes with the fp32 loop instead, so results are IEEE fp32 arithmetic's
// either way (only the summation order differs from the fp32 loop's).
//
// Build options:
//   FP4CL_FORMAT_MXFP4  1 for MXFP4 weights, 0 for NVFP4
//   WORDS_TOKENS        tokens per work-item of linear_gemv_words_tokens (_single: 1, _pair: 2)
//   WORDS_BF16_X        1: x is BF16 [M, K] (W4A16; W4A4 from the pre-pass with FP4_DPBF16), converted
//                       into `xl` (not with WORDS_BF16DOT);
//                       0: split fp32 rows, `xl` unused
//   WORDS_X_FROM_PASS   defined: x is the W4A4 pre-pass's BF16 rows (linear_quantize_fp4_bf16)
//   WORDS_PREFETCH      chunks ahead to prefetch in the BF16 loop (0: none; below)
//   WORDS_LUT8          1: the fp32 loop decodes with an 8-entry table and a sign bit (8-lane
//                       SIMD, AVX2; below)
//   FP4_DPBF16          BF16 dot products (see above); WORDS_REQUIRE_BF16DOT: an error if this
//                       compiler cannot build them (FP4CL_LINEAR_BF16_DOT=1)
// Launch: global (roundup(ceil(N / 16), local0), ceil(M / tokens)), any local size; `xl` holds
// tokens × K floats (WORDS_BF16_X) or one.
#include "common/bf16.cl"
#include "common/bf16_dot.cl"
#include "common/fp4_dot.cl"

// Software prefetch in the BF16 loop (WORDS_PREFETCH chunks ahead; 0 or undefined: none): both
// 64-byte lines of a chunk's words and, every 4 chunks, the line of their block scales (NVFP4;
// MXFP4's scales, half as many, are then fetched further ahead). One PoCL thread streamed ~16
// GB/s of weights without it where a plain read reaches ~30 (README, PoCL section). A prefetch
// past the buffer's end is harmless (it never faults).
#if defined(WORDS_PREFETCH) && WORDS_PREFETCH > 0
#define WORDS_PREFETCH_AT(wp, sp, c)                                                         \
  __builtin_prefetch((const __global char*)((wp) + 32u * ((c) + WORDS_PREFETCH)), 0, 3);      \
  __builtin_prefetch((const __global char*)((wp) + 32u * ((c) + WORDS_PREFETCH) + 16u), 0, 3); \
  if (((c) & 3u) == 0u) __builtin_prefetch((const __global char*)((sp) + 16u * ((c) + WORDS_PREFETCH)), 0, 3);
#else
#define WORDS_PREFETCH_AT(wp, sp, c)
#endif

#ifndef WORDS_TOKENS
#error "WORDS_TOKENS (tokens per work-item) must be defined"
#endif
#ifndef WORDS_BF16_X
#define WORDS_BF16_X 0
#endif
// Whether an activation can be nonzero and below 2^-100 in magnitude (see WORDS_BF16DOT): not the
// NVFP4 W4A4 pre-pass's BF16 rows (WORDS_X_FROM_PASS), e2m1 × E4M3 scale, at least 2^-10 when
// nonzero; so those skip the scan for them (MXFP4's E8M0 scales reach 2^-127: scanned).
#if defined(WORDS_X_FROM_PASS) && !FP4CL_FORMAT_MXFP4
#define WORDS_X_CAN_BE_TINY 0
#else
#define WORDS_X_CAN_BE_TINY 1
#endif
// Tokens per work-item of any of the three kernels (_pair: 2 even where WORDS_TOKENS is 1).
#define WORDS_MAX_TOKENS (WORDS_TOKENS > 2 ? WORDS_TOKENS : 2)
// BF16 dot products read BF16 rows only (WORDS_BF16_X).
#define WORDS_BF16DOT (FP4_BF16DOT && WORDS_BF16_X)
#if defined(WORDS_REQUIRE_BF16DOT) && !WORDS_BF16DOT
#error "BF16 dot products were required (FP4CL_LINEAR_BF16_DOT=1), but this OpenCL compiler cannot build them"
#endif
#if FP4CL_FORMAT_MXFP4
#define WORDS_BLOCK 32
#else
#define WORDS_BLOCK 16
#endif

// The bit offset of element 8g + j's nibble in word g (pair order, fp4_words_layout.hpp).
#define WORDS_SHIFT(j) (4u * ((j) / 2u) + 16u * ((j) % 2u))

// Lane i of the result is t[i_lane]; the caller masks the indices to 0..15. Written as one
// element per lane with a variable index, which LLVM turns into one variable permute (vpermps)
// on AVX-512; OpenCL's shuffle() is scalarized by PoCL (../shared/spec/DEVICES.md).
inline float16 words_lut(float16 t, uint16 i) {
  return (float16)(t[i.s0], t[i.s1], t[i.s2], t[i.s3], t[i.s4], t[i.s5], t[i.s6], t[i.s7], t[i.s8], t[i.s9], t[i.sa],
                   t[i.sb], t[i.sc], t[i.sd], t[i.se], t[i.sf]);
}

// WORDS_LUT8 (CPUs with 8-lane vectors, AVX2: the host defines it where the preferred float width
// is below 16): a 16-entry table does not fit one 8-lane register, and LLVM lowers words_lut's
// lookup lane by lane through memory (measured: linear 4096x4096 M = 1 9.6 ms on 2 AVX2 cores).
// Instead the magnitude comes from an 8-entry table (one vpermps per 8 lanes, indexed by the
// nibble's low 3 bits) and the sign bit (the nibble's bit 3) is moved to bit 31 and xor-ed in:
// the same exact E2M1 values, bit-identical results.
#ifndef WORDS_LUT8
#define WORDS_LUT8 0
#endif
inline float16 words_lut8(float8 t, uint16 i) {
  return (float16)(t[i.s0], t[i.s1], t[i.s2], t[i.s3], t[i.s4], t[i.s5], t[i.s6], t[i.s7], t[i.s8], t[i.s9], t[i.sa],
                   t[i.sb], t[i.sc], t[i.sd], t[i.se], t[i.sf]);
}
// The E2M1 value of the nibble at bit `shift` of each lane's word (shift <= 28).
inline float16 words_e2m1_lut8(float8 magnitudes, uint16 w, uint shift) {
  const float16 m = words_lut8(magnitudes, (w >> shift) & 7u);
  return as_float16(as_uint16(m) ^ ((w << (28u - shift)) & 0x80000000u));
}

// The 16 rows' scales of one block (16 bytes at s, 4-byte aligned).
inline float16 words_block_scales(const __global uchar* restrict s, int exp_bias) {
  const int16 b = convert_int16(as_uchar16(vload4(0, (const __global uint*)s)));
#if FP4CL_FORMAT_MXFP4
  return as_float16(clamp(b + exp_bias, 1, 254) << 23);
#else
  (void)exp_bias;
  return as_float16(b << 20) * 0x1p120f;  // E4M3 magnitude bits at 20..26: e4m3 × 2^-120
#endif
}

#if WORDS_BF16DOT
// The BF16 dot products of the 16 rows at wp (scales sp) with N tokens from m0 (rows past the last
// repeat it; x: BF16 rows [M, K], whose 32-bit words are the BF16 pairs) into acc[0..N-1], as the
// fp32 loop's acc. Returns nonzero when an activation of these tokens is nonzero and below 2^-100
// in magnitude (acc is then not to be used). Not inlined: the kernel is built for the device's
// base instruction set, this for the one with BF16.
// Element pairs 0..3 of word vector W (pairs 8c + 4Q + p of the row: elements 16c + 8Q + 2p and
// 16c + 8Q + 2p + 1, nibbles p and p + 4 of the pair-order word), sums A, B.
#define WORDS_BF16_STEPS(W, Q, A, B, N)                                                               \
  _Pragma("unroll") for (int p = 0; p < 4; ++p) {                                                     \
    const fp4_v16si d = fp4_bf16_quad_pair(table, W, p);                                               \
    _Pragma("unroll") for (int t = 0; t < (N); ++t) {                                                 \
      if (p % 2 == 0) A[t] = fp4_bf16_dot(A[t], d, xr[t][8u * c + 4u * (Q) + (uint)p]);               \
      else B[t] = fp4_bf16_dot(B[t], d, xr[t][8u * c + 4u * (Q) + (uint)p]);                          \
    }                                                                                                 \
  }
#define WORDS_BF16_DOT_N(NAME, N)                                                                     \
  FP4_BF16_TARGET __attribute__((noinline)) int NAME(                                                 \
      const __global uint* restrict wp, const __global uchar* restrict sp, const __global void* restrict xin, \
      uint m0, uint m_tokens, uint k, int exp_bias, float16* out) {                                   \
    const __global uint* xr[N];                                                                       \
    _Pragma("unroll") for (int t = 0; t < (N); ++t) {                                                 \
      xr[t] = (const __global uint*)xin + (size_t)min(m0 + (uint)t, m_tokens - 1u) * (k / 2u);       \
      if (WORDS_X_CAN_BE_TINY && fp4_bf16_any_tiny(xr[t], k / 2u)) return 1;                          \
    }                                                                                                 \
    const fp4_v32hi table = fp4_bf16_table();                                                         \
    const fp4_v16sf zero = __builtin_astype((float16)(0.0f), fp4_v16sf);                              \
    float16 acc[N];                                                                                   \
    _Pragma("unroll") for (int t = 0; t < (N); ++t) acc[t] = (float16)(0.0f);                         \
    for (uint c = 0; c < k / 16u; ++c) {                                                              \
      WORDS_PREFETCH_AT(wp, sp, c)                                                                    \
      const uint16 w0 = vload16(2u * c, wp), w1 = vload16(2u * c + 1u, wp);                           \
      fp4_v16sf a[N], b[N];                                                                           \
      _Pragma("unroll") for (int t = 0; t < (N); ++t) a[t] = b[t] = zero;                             \
      WORDS_BF16_STEPS(w0, 0u, a, b, N)                                                               \
      WORDS_BF16_STEPS(w1, 1u, a, b, N)                                                               \
      const float16 s = words_block_scales(sp + (c / (WORDS_BLOCK / 16u)) * 16u, exp_bias);           \
      _Pragma("unroll") for (int t = 0; t < (N); ++t)                                                 \
        acc[t] = fma(__builtin_astype(a[t], float16) + __builtin_astype(b[t], float16), s, acc[t]);   \
    }                                                                                                 \
    _Pragma("unroll") for (int t = 0; t < (N); ++t) out[t] = acc[t];                                  \
    return 0;                                                                                         \
  }
WORDS_BF16_DOT_N(words_bf16_dot_1, 1)
WORDS_BF16_DOT_N(words_bf16_dot_2, 2)
WORDS_BF16_DOT_N(words_bf16_dot_tokens, WORDS_TOKENS)
#endif

inline void gemv_words(const __global uint* restrict codes, const __global uchar* restrict scales,
                       const __global void* restrict xin, __global uchar* restrict y,
                       const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,
                       int exp_bias, float epilogue, int has_bias, int out_bf16, __local float* restrict xl,
                       const uint tokens) {
  const uint g = get_global_id(0);
  const uint m0 = get_global_id(1) * tokens;
#if WORDS_BF16_X && WORDS_BF16DOT
  // BF16 dot products read the BF16 rows themselves; so does the fp32 loop (the fallback for tiny
  // activations), converting each element as it reads it.
  (void)xl;
  const __global ushort* xb = (const __global ushort*)xin;
#elif WORDS_BF16_X
  // The group's tokens' BF16 rows to fp32 (element order) in local memory, shared by its work-items;
  // a token past the last repeats it (results dropped). Every work-item meets the barrier.
  const __global ushort* xb = (const __global ushort*)xin;
  for (uint i = get_local_id(0); i < tokens * (k / 16u); i += get_local_size(0)) {
    const uint t = i / (k / 16u), c = i % (k / 16u);
    const __global ushort* row = xb + (size_t)min(m0 + t, m_tokens - 1u) * k;
    vstore16(bf16x16(row, c), 0, xl + t * k + 16u * c);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#else
  (void)xl;
  const __global float* restrict x = (const __global float*)xin;
#endif
  if (g * 16u >= n_rows || m0 >= m_tokens) return;
  const uint chunks = k / 16u;
  const __global uint* wp = codes + (size_t)g * (k / 8u) * 16u;
  const __global uchar* sp = scales + (size_t)g * (k / WORDS_BLOCK) * 16u;
#if WORDS_BF16DOT
  {
    float16 dot[WORDS_MAX_TOKENS];
    const int tiny = tokens == 1u   ? words_bf16_dot_1(wp, sp, xin, m0, m_tokens, k, exp_bias, dot)
                     : tokens == 2u ? words_bf16_dot_2(wp, sp, xin, m0, m_tokens, k, exp_bias, dot)
                                    : words_bf16_dot_tokens(wp, sp, xin, m0, m_tokens, k, exp_bias, dot);
    if (!tiny) {
      for (uint t = 0; t < tokens; ++t) {
        const uint m = m0 + t;
        if (m >= m_tokens) break;
        fp4_store_rows16(y, dot[t], m, g * 16u, n_rows, epilogue, bias, has_bias, out_bf16);
      }
      return;
    }
  }
#endif
  const uint half_k = kpad / 2u;
#if WORDS_LUT8
  const float8 magnitudes = (float8)(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
#else
  const float16 table = (float16)(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                                  -3.0f, -4.0f, -6.0f);
#endif

#if WORDS_BF16_X && WORDS_BF16DOT
  // Element 16c + i of token t at xb[row·K + 16c + i], a BF16 number.
#define WORDS_X_AT(t, c) (xb + (size_t)min(m0 + (t), m_tokens - 1u) * k + 16u * (c))
#define WORDS_EVEN(p, i) as_float((uint)(p)[2 * (i)] << 16)
#define WORDS_ODD(p, i) as_float((uint)(p)[2 * (i) + 1] << 16)
  float16 acc[WORDS_MAX_TOKENS];
  for (uint t = 0; t < tokens; ++t) acc[t] = (float16)(0.0f);
#elif WORDS_BF16_X
  // Element 16c + i of token t at xl[t·K + 16c + i].
#define WORDS_X_AT(t, c) (xl + (t) * k + 16u * (c))
#define WORDS_EVEN(p, i) ((p)[2 * (i)])
#define WORDS_ODD(p, i) ((p)[2 * (i) + 1])
  float16 acc[WORDS_MAX_TOKENS];
  for (uint t = 0; t < tokens; ++t) acc[t] = (float16)(0.0f);
#else
  // Split rows: element 16c + 2i at x_even[8c + i], 16c + 2i + 1 at x_odd[8c + i].
  // Token t reads row min(m0 + t, M - 1): a group past the last token repeats it (results dropped).
#define WORDS_X_AT(t, c) (xe[t] + 8u * (c))
#define WORDS_EVEN(p, i) ((p)[i])
#define WORDS_ODD(p, i) ((p)[half_k + (i)])
  const __global float* xe[WORDS_MAX_TOKENS];
  float16 acc[WORDS_MAX_TOKENS];
  for (uint t = 0; t < tokens; ++t) {
    xe[t] = x + (size_t)min(m0 + t, m_tokens - 1u) * kpad;
    acc[t] = (float16)(0.0f);
  }
#endif

  for (uint c = 0; c < chunks; ++c) {
    const uint16 w0 = vload16(2u * c, wp), w1 = vload16(2u * c + 1u, wp);
    // dj: element 16c + j of the 16 rows (w0: j < 8, w1: j >= 8), nibble WORDS_SHIFT(j % 8).
#if WORDS_LUT8
#define WORDS_D(w, j) words_e2m1_lut8(magnitudes, w, WORDS_SHIFT(j))
#else
#define WORDS_D(w, j) words_lut(table, (j) == 7u ? (w) >> 28u : ((w) >> WORDS_SHIFT(j)) & 15u)
#endif
    const float16 d0 = WORDS_D(w0, 0u), d1 = WORDS_D(w0, 1u), d2 = WORDS_D(w0, 2u), d3 = WORDS_D(w0, 3u);
    const float16 d4 = WORDS_D(w0, 4u), d5 = WORDS_D(w0, 5u), d6 = WORDS_D(w0, 6u), d7 = WORDS_D(w0, 7u);
    const float16 d8 = WORDS_D(w1, 0u), d9 = WORDS_D(w1, 1u), d10 = WORDS_D(w1, 2u), d11 = WORDS_D(w1, 3u);
    const float16 d12 = WORDS_D(w1, 4u), d13 = WORDS_D(w1, 5u), d14 = WORDS_D(w1, 6u), d15 = WORDS_D(w1, 7u);
#undef WORDS_D
    const float16 s = words_block_scales(sp + (c / (WORDS_BLOCK / 16u)) * 16u, exp_bias);
    for (uint t = 0; t < tokens; ++t) {
#if WORDS_BF16_X && WORDS_BF16DOT
      const __global ushort* p = WORDS_X_AT(t, c);
#elif WORDS_BF16_X
      __local const float* p = WORDS_X_AT(t, c);
#else
      const __global float* p = WORDS_X_AT(t, c);
#endif
      // Four chains: elements 4i + r go to chain r.
      float16 a0 = d0 * WORDS_EVEN(p, 0), a1 = d1 * WORDS_ODD(p, 0), a2 = d2 * WORDS_EVEN(p, 1), a3 = d3 * WORDS_ODD(p, 1);
      a0 = fma(d4, (float16)(WORDS_EVEN(p, 2)), a0);
      a1 = fma(d5, (float16)(WORDS_ODD(p, 2)), a1);
      a2 = fma(d6, (float16)(WORDS_EVEN(p, 3)), a2);
      a3 = fma(d7, (float16)(WORDS_ODD(p, 3)), a3);
      a0 = fma(d8, (float16)(WORDS_EVEN(p, 4)), a0);
      a1 = fma(d9, (float16)(WORDS_ODD(p, 4)), a1);
      a2 = fma(d10, (float16)(WORDS_EVEN(p, 5)), a2);
      a3 = fma(d11, (float16)(WORDS_ODD(p, 5)), a3);
      a0 = fma(d12, (float16)(WORDS_EVEN(p, 6)), a0);
      a1 = fma(d13, (float16)(WORDS_ODD(p, 6)), a1);
      a2 = fma(d14, (float16)(WORDS_EVEN(p, 7)), a2);
      a3 = fma(d15, (float16)(WORDS_ODD(p, 7)), a3);
      acc[t] = fma((a0 + a1) + (a2 + a3), s, acc[t]);
    }
  }
#undef WORDS_X_AT
#undef WORDS_EVEN
#undef WORDS_ODD

  for (uint t = 0; t < tokens; ++t) {
    const uint m = m0 + t;
    if (m >= m_tokens) break;
    fp4_store_rows16(y, acc[t], m, g * 16u, n_rows, epilogue, bias, has_bias, out_bf16);
  }
}

#define WORDS_KERNEL(name, tokens)                                                                              \
  __kernel void name(const __global uint* restrict codes, const __global uchar* restrict scales,                \
                     const __global void* restrict x, __global uchar* restrict y,                               \
                     const __global float* restrict bias, uint n_rows, uint m_tokens, uint kpad, uint k,        \
                     int exp_bias, float epilogue, int has_bias, int out_bf16, __local float* restrict xl) {    \
    gemv_words(codes, scales, x, y, bias, n_rows, m_tokens, kpad, k, exp_bias, epilogue, has_bias, out_bf16, \
               xl, tokens);                                                                                     \
  }
WORDS_KERNEL(linear_gemv_words_single, 1u)
WORDS_KERNEL(linear_gemv_words_pair, 2u)
WORDS_KERNEL(linear_gemv_words_tokens, WORDS_TOKENS)
