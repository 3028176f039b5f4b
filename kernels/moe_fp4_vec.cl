// Vector pieces of the MoE expert GEMMs (included by moe_fc1.cl and moe_fc2.cl).
//
// Weight layout (prepared once by the host, host/layers/moe_weights.cpp): the rows of each
// expert's matrix are taken in groups of MOE_GROUP. Within a group, the 4-byte words holding
// elements 8g..8g+7 of every row sit side by side (row r at word g·MOE_GROUP + r % MOE_GROUP),
// and so do the block-scale bytes of block b. A work-item owns MOE_VEC consecutive rows of a
// group as the lanes of one vector: one load brings 8 elements of each of its rows, and the
// activation x[k] is a broadcast scalar. On a CPU the lanes are SIMD lanes (MOE_VEC = the
// device's preferred float width); on a GPU MOE_VEC = 1 and neighbouring work-items read
// neighbouring words (coalesced), while the activation is the same address for all of them.
//
// E2M1 decode, FP4.md §1: as_float(sign << 31 | code << 22) = e2m1 × 2^-126. For nibble j of a
// word, an arithmetic shift moves the nibble's sign across bits 31..25 and its magnitude to bits
// 24..22; one mask keeps bits 31 and 24..22. (Codes ±0.5 are fp32 subnormals: devices without
// fp32 denormals build with MOE_E2M1_NO_DENORM, which decodes the exact values instead.)
// Block scales: NVFP4's E4M3 scales are stored as fp16 (every E4M3 value is an fp16 number), so
// one vload_half converts a vector of them; MXFP4's E8M0 bytes become exponents. Each is scaled
// by 2^scale_exp and applied to the decoded weights before they meet the activations, so every
// product is a normal fp32 number; the host folds 2^-(scale_exp + MOE_E2M1_EXP) into each
// row's factor.
//
// Build-time parameters: MOE_NVFP4 (else MXFP4), MOE_VEC (1, 2, 4, 8 or 16), MOE_GROUP (a
// multiple of MOE_VEC), MOE_E2M1_NO_DENORM.
#ifndef FP4CL_MOE_FP4_VEC_CL
#define FP4CL_MOE_FP4_VEC_CL

#include "common/formats.cl"

#ifdef MOE_NVFP4
#define MOE_BLOCK 16
#else
#define MOE_BLOCK 32
#endif

#define MOE_CAT_(a, b) a##b
#define MOE_CAT(a, b) MOE_CAT_(a, b)
#if MOE_VEC == 1
#define floatV float
#define intV int
#define uintV uint
#define convert_intV convert_int
#define convert_floatV convert_float
#define as_floatV as_float
#define as_intV as_int
#define moe_loadV(p) (*(p))
#define moe_storeV(v, p) (*(p) = (v))
#else
#define floatV MOE_CAT(float, MOE_VEC)
#define intV MOE_CAT(int, MOE_VEC)
#define uintV MOE_CAT(uint, MOE_VEC)
#define convert_intV MOE_CAT(convert_int, MOE_VEC)
#define convert_floatV MOE_CAT(convert_float, MOE_VEC)
#define as_floatV MOE_CAT(as_float, MOE_VEC)
#define as_intV MOE_CAT(as_int, MOE_VEC)
#define moe_loadV(p) MOE_CAT(vload, MOE_VEC)(0, p)
#define moe_storeV(v, p) MOE_CAT(vstore, MOE_VEC)(v, 0, p)
#endif

// A layer output: BF16 (MOE_OUT_BF16: round to nearest even, NaN kept quiet) or fp32, at element i
// of the caller's buffer (moe_fc2.cl, and with MOE_VEC 1 moe_split.cl and moe_mma.cl).
inline void moe_store_out(floatV o, __global void* out, long i) {
#if MOE_OUT_BF16
  const intV u = as_intV(o);
  const intV bits = select((u + 0x7FFF + ((u >> 16) & 1)) >> 16, (u >> 16) | 0x40, isnan(o));
#if MOE_VEC == 1
  ((__global ushort*)out)[i] = (ushort)bits;
#else
  moe_storeV(MOE_CAT(convert_ushort, MOE_VEC)(bits & 0xFFFF), (__global ushort*)out + i);
#endif
#else
  moe_storeV(o, (__global float*)out + i);
#endif
}

// vpermps through clang's AVX-512 builtin (PoCL on x86 CPUs with AVX-512F, 16-lane layouts): a
// table lookup per lane in one instruction, which reads only the low 4 bits of each index. Used by
// the exact E2M1 decode below and by MOE_LUT; MOE_NO_PERMVAR turns it off.
#if MOE_VEC == 16 && defined(__has_builtin) && !defined(MOE_NO_PERMVAR)
#if __has_builtin(__builtin_ia32_permvarsf512) && defined(__AVX512F__)
#define MOE_PERMVAR 1
#endif
#endif
#ifndef MOE_PERMVAR
#define MOE_PERMVAR 0
#endif
// The 16 E2M1 values, by code.
#define MOE_E2M1_TABLE \
  (float16)(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f)

// Element 8g + j of each lane's row, from the word of elements 8g..8g+7.
#ifndef MOE_E2M1_NO_DENORM
#define MOE_E2M1_EXP (-126)
inline floatV moe_e2m1(uintV w, int j) {
  return as_floatV((as_intV(w << (28 - 4 * j)) >> 6) & (int)0x81C00000);
}
#else
#define MOE_E2M1_EXP 0
#if MOE_PERMVAR
// The exact values by one permute of the table: a shift and a vpermps per 16 weights, against
// ten instructions for the selects below (CPUs whose processor multiplies denormals slowly take
// this decode: kernels/cpu_denormal_speed.hpp). The same values, so the same bits.
inline floatV moe_e2m1(uintV w, int j) {
  return __builtin_ia32_permvarsf512(MOE_E2M1_TABLE, as_int16(j == 0 ? w : w >> (uint)(4 * j)));
}
#else
// Magnitude codes 2..7 through the exponent (base 126); codes 0 and 1 (0 and 0.5) by a select.
inline floatV moe_e2m1(uintV w, int j) {
  const intV v = as_intV(w << (28 - 4 * j)) >> 6;
  const intV mag = v & 0x01C00000;
  const intV small = select((intV)(0), (intV)(0x3F000000), mag == 0x00400000);
  return as_floatV(select(mag + (126 << 23), small, mag < 0x00800000) | (v & (int)0x80000000));
}
#endif
#endif

// The block scales of the lanes (MOE_VEC consecutive entries at p), as s × 2^scale_exp.
#ifdef MOE_NVFP4
typedef half moe_scale_t;
inline floatV moe_block_scales(const __global moe_scale_t* p, int scale_exp) {
#if MOE_VEC == 1
  return vload_half(0, p) * as_float((scale_exp + 127) << 23);
#else
  return MOE_CAT(vload_half, MOE_VEC)(0, p) * as_float((scale_exp + 127) << 23);
#endif
}
#else
typedef uchar moe_scale_t;
inline floatV moe_block_scales(const __global moe_scale_t* p, int scale_exp) {
  return as_floatV((convert_intV(moe_loadV(p)) + scale_exp) << 23);
}
#endif

// Decode tiles of few pairs on 16-lane CPU vectors (MOE_LUT): element j of the 16 rows is one
// lookup in a float16 table of the exact E2M1 values, indexed by the nibble, which LLVM compiles to
// one vpermps on AVX-512 (a variable-index vector written lane by lane; OpenCL's shuffle() is
// scalarized by PoCL), and the products of a block accumulate unscaled and meet the block's scales
// once per block: per 16 weights a shift, a mask (see MOE_PERMVAR), a permute and an FMA, against a shift, a shift, a
// mask, a scale multiply and an FMA for moe_e2m1. NVFP4 (its block scales times 2^MOE_E2M1_EXP
// are e4m3 × 2^-7 or e4m3: normal fp32 numbers), and MXFP4 with the exact decode, whose block
// scales times 2^MOE_E2M1_EXP = 1 are the decoded scales 2^(e + scale_exp - 127), which the host
// keeps normal (mxfp4_decode_scale_exp_fits); with the subnormal decode an MXFP4 scale times
// 2^-126 would not be (its range does not guarantee it), so that build keeps moe_e2m1. Tiles of
// more than MOE_LUT_MAX_PAIRS pairs, and batch-invariant builds (one summation order for every
// tile size), keep moe_e2m1. GPUs (MOE_VEC < 16) never use it.
#if MOE_VEC == 16 && (defined(MOE_NVFP4) || defined(MOE_E2M1_NO_DENORM)) && !defined(MOE_BATCH_INVARIANT) && \
    !defined(MOE_NO_LUT)
#define MOE_LUT 1
#define MOE_LUT_MAX_PAIRS 4
#define MOE_LUT_TABLE MOE_E2M1_TABLE
// With clang's AVX-512 builtins (MOE_PERMVAR, above) the lookup is vpermps itself, which reads only
// the low 4 bits of each index: the nibble needs its shift but no mask, so per 16 weights a shift,
// a permute and an FMA (measured in the README's PoCL section). Elsewhere, and with
// MOE_NO_PERMVAR, the lane-by-lane lookup below (LLVM needs the mask there to prove every index is
// in range; without it, it scalarizes). Both give the same table values: bit-identical results.
inline float16 moe_lut16(float16 t, uint16 i) {
  return (float16)(t[i.s0], t[i.s1], t[i.s2], t[i.s3], t[i.s4], t[i.s5], t[i.s6], t[i.s7], t[i.s8], t[i.s9], t[i.sa],
                   t[i.sb], t[i.sc], t[i.sd], t[i.se], t[i.sf]);
}
// The exact E2M1 values of element 8g + j of each lane's row, from the word of elements 8g..8g+7.
inline float16 moe_lut_e2m1(float16 table, uint16 w, int j) {
#if MOE_PERMVAR
  return __builtin_ia32_permvarsf512(table, as_int16(j == 0 ? w : w >> (uint)(4 * j)));
#else
  return moe_lut16(table, j == 7 ? w >> 28u : (w >> (uint)(4 * j)) & 15u);
#endif
}
// The block scales for unscaled E2M1 sums: those of moe_block_scales times 2^MOE_E2M1_EXP, so
// that the host's factor 2^-(scale_exp + MOE_E2M1_EXP) still applies (NVFP4: e4m3 × 2^-7 at
// scale_exp 119, normal for every E4M3 value).
inline float16 moe_lut_block_scales(const __global moe_scale_t* p, int scale_exp) {
  return moe_block_scales(p, scale_exp) * as_float((127 + MOE_E2M1_EXP) << 23);
}
#else
#define MOE_LUT 0
#define MOE_LUT_MAX_PAIRS 0
#endif

// Tiles of few pairs by AVX-512 BF16 dot products (MOE_BF16DOT; common/bf16_dot.cl: the host
// defines FP4_DPBF16 for CPU devices whose processor has AVX-512 BW, VBMI and BF16,
// host/kernels/moe_build_options.cpp, and the OpenCL compiler must be one whose builtins that
// file knows). Per word vector (8 elements of each of the 16 rows) and element pair, 2 or 3 vector
// instructions per 32 weights (fp4_bf16_quad_pair, fp4_bf16_dot), against 6 for the table decode
// above. The activations are BF16 numbers held in fp32 (W4A16: the input or the BF16-rounded
// SwiGLU output; W4A4: e2m1 × an E4M3 scale, 6 significant bits); their producers also write them
// packed into BF16 pairs (x1q, x2q: moe_bf16_quads16 in common/bf16_dot.cl). A block's 8 pair steps alternate between two
// sums, which meet the block's scales as in the table decode. A pair with an activation below
// 2^-100 in magnitude (never under W4A4: e2m1 × E4M3 >= 2^-10) is computed again with the table
// decode (see MOE_BF16_DOT_N), so results are those of IEEE fp32 arithmetic either way. Tiles of
// up to MOE_BF16_MAX_PAIRS pairs (each decoded pair of weights feeds every pair's dot product)
// and tiles of 2 · MOE_BF16_MAX_PAIRS (FC2 in one pass, FC1 in two; moe_fc1.cl, moe_fc2.cl);
// other tiles keep the fp32 decode or panels; not in batch-invariant builds (as MOE_LUT). NVFP4
// and, where MOE_LUT serves it (the exact decode), MXFP4: its blocks of 32 are two steps of 16
// that meet the same E8M0 scale, as moe_lut_block_scales gives it.
#include "common/bf16_dot.cl"
#if MOE_LUT && FP4_BF16DOT
#define MOE_BF16DOT 1
#else
#define MOE_BF16DOT 0
#endif

#if MOE_BF16DOT
#define MOE_BF16_MAX_PAIRS 4

// Software prefetch in the BF16 loops, MOE_PREFETCH blocks of 16 elements ahead (0: none): both
// words of the block and, every other block, the line of its fp16 scales (MOE_GROUP 16, the CPU
// layout). As gemv_words' WORDS_PREFETCH (linear_gemv_words.cl): one PoCL thread streamed its
// weights at about half of what a plain read of one thread reaches. Never faults.
#ifndef MOE_PREFETCH
#define MOE_PREFETCH 32
#endif
// The cache level they fill: __builtin_prefetch's locality, 2 = prefetcht1 (L2), not 3 = prefetcht0
// (L1). 32 blocks ahead, FC1 has ~128 lines in flight per thread, more than L1's miss buffers hold;
// filling L2 and letting the loads hit there streamed more per thread (A/B in
// bench/pocl-history/amd-epyc-avx512.md). gemv_words keeps prefetcht0 (slower with prefetcht1
// there).
#ifndef MOE_PREFETCH_LOCALITY
#define MOE_PREFETCH_LOCALITY 2
#endif
#if MOE_PREFETCH > 0
#define MOE_PREFETCH_AT(w, s, b)                                                                        \
  __builtin_prefetch((const __global char*)((w) + (long)(2 * ((b) + MOE_PREFETCH)) * MOE_GROUP), 0, MOE_PREFETCH_LOCALITY);     \
  __builtin_prefetch((const __global char*)((w) + (long)(2 * ((b) + MOE_PREFETCH) + 1) * MOE_GROUP), 0, MOE_PREFETCH_LOCALITY); \
  if (((b) & 1) == 0)                                                                                   \
    __builtin_prefetch((const __global char*)((s) + ((16 * ((b) + MOE_PREFETCH)) / MOE_BLOCK) * MOE_GROUP), 0, MOE_PREFETCH_LOCALITY);
#else
#define MOE_PREFETCH_AT(w, s, b)
#endif

// Element pairs (j, j + 4) of each word (common/bf16_dot.cl's fp4_bf16_quad_pair on the checkpoint's
// nibble order): the vpermw index of pair p is the word shifted right by 4p (one vpsrld, none for
// p = 0) where pairs (2p, 2p + 1) took one vpmultishiftqb per pair. Measured in a standalone loop
// of the FC1 decode with its weights in L2 (README, PoCL section): 20 % faster per core (32 against
// 26 GB/s of weights) — vpmultishiftqb was the bottleneck there.
// The activations in those pairs come packed by their producers (moe_bf16_quads16, below): moe_gather
// writes x1q beside x1, moe_fc1 x2q beside x2, rows of K/2 uints (xq[4q + p] = bf16(x[8q + p]) |
// bf16(x[8q + p + 4]) << 16). Each work-item used to pack its tile's rows itself, chunk by chunk:
// at T = 1 that was about a fifth of FC1's and a third of FC2's vector instructions (README, PoCL
// small decode calls).

// Σ_k w[row, k] · x_m[k] of the 16 rows of a work-item (words w, block scales s as in
// moe_fp4_vec.cl) over k < kk, scaled as the table decode's sums, for N pairs m (x_m: packed row
// min(m, count - 1) from xq, rows kk / 2 uints apart): each decoded pair of weights meets every
// pair's activations. Per block each pair's sum runs in two chains (element pairs (0, 4), (2, 6) and
// (1, 5), (3, 7) of each word), so a pair's bits do not depend on N. Returns 0, or 1 when an activation is nonzero and
// below 2^-100 in magnitude (the caller then computes the tile with the table decode; never where
// MOE_BF16_X_TINY is 0: NVFP4 W4A4's e2m1 × E4M3 values, at least 2^-10): otherwise
// every product and partial sum is 0 or a multiple of 2^-108, never denormal, so vdpbf16ps's
// flushing never acts and the sums are those of IEEE fp32 arithmetic in this order. MOE_BF16_DOT_N(name, N): one matrix (FC2);
// MOE_BF16_DOT2_N(name, N): two sharing x (FC1's gate and up). Not inlined: the kernel is built for
// the device's base instruction set, these functions for the one with BF16.
#ifndef MOE_BF16_X_TINY
#define MOE_BF16_X_TINY 1
#endif
#define MOE_BF16_ROWS_N(N)                                                                       \
  const __global uint* xr[N];                                                                    \
  _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                              \
    xr[m] = xq + (long)min(m, count - 1) * (kk / 2);                                             \
    if (MOE_BF16_X_TINY && m < count && fp4_bf16_any_tiny(xr[m], kk / 2)) return 1;              \
  }
#define MOE_BF16_STEPS(W, Q, A, B, N)                                                            \
  _Pragma("unroll") for (int p = 0; p < 4; ++p) {                                                                  \
    const fp4_v16si d = fp4_bf16_quad_pair(table, W, p);                                         \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                            \
      if (p % 2 == 0) A[m] = fp4_bf16_dot(A[m], d, xr[m][8 * b + 4 * (Q) + p]);                  \
      else B[m] = fp4_bf16_dot(B[m], d, xr[m][8 * b + 4 * (Q) + p]);                             \
    }                                                                                            \
  }
#define MOE_BF16_TABLE_V                                                                         \
  const fp4_v32hi table = fp4_bf16_table();                                                      \
  const fp4_v16sf zero = __builtin_astype((float16)(0.0f), fp4_v16sf);                           \
  const float scale_pow2 = as_float((scale_exp + MOE_E2M1_EXP + 127) << 23)

// The block scales of the 16 lanes as moe_lut_block_scales gives them, for the BF16 loops: one
// vcvtph2ps of the 16 fp16 scales and one multiply by scale_pow2 = 2^(scale_exp + MOE_E2M1_EXP)
// (NVFP4: 2^-7, or 2^0 with MOE_E2M1_NO_DENORM; normal), where vload_half16 and two multiplies
// compiled to two conversions, an insert and two multiplies per block and matrix. The same
// values: s × 2^scale_exp is exact (no E4M3 value overflows at scale_exp 119), its product with
// 2^MOE_E2M1_EXP is exact and normal, so one multiply by the product of the powers rounds
// nothing either.
#ifdef MOE_NVFP4
typedef short moe_v16hi __attribute__((vector_size(32)));
FP4_BF16_TARGET inline float16 moe_bf16_block_scales(const __global moe_scale_t* p, float scale_pow2) {
  const moe_v16hi h = __builtin_astype(vload16(0, (const __global short*)p), moe_v16hi);
  const fp4_v16sf f = __builtin_ia32_vcvtph2ps512_mask(h, __builtin_astype((float16)(0.0f), fp4_v16sf), (ushort)0xFFFF, 4);
  return __builtin_astype(f, float16) * scale_pow2;
}
#define MOE_BF16_SCALES(p) moe_bf16_block_scales((p), scale_pow2)
#else
// MXFP4: the E8M0 bytes become the exponent fields of 2^(e + scale_exp) (moe_block_scales), times
// 2^MOE_E2M1_EXP = 1: the LUT's scales, normal numbers (the host keeps them so).
#define MOE_BF16_SCALES(p) ((void)scale_pow2, moe_lut_block_scales((p), scale_exp))
#endif

#define MOE_BF16_DOT_N(NAME, N)                                                                              \
  FP4_BF16_TARGET __attribute__((noinline)) int NAME(const __global uint* w, const __global moe_scale_t* s,  \
                                                      int kk, int scale_exp, const __global uint* xq, int count, \
                                                      float16* out) {                                        \
    MOE_BF16_ROWS_N(N)                                                                                       \
    MOE_BF16_TABLE_V;                                                                                        \
    float16 acc[N];                                                                                          \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) acc[m] = (float16)(0.0f);                                \
    for (int b = 0; b < kk / 16; ++b) {                                                                      \
      MOE_PREFETCH_AT(w, s, b)                                                                               \
      const int g = 2 * b;                                                                                   \
      const uint16 w0 = vload16(0, w + (long)g * MOE_GROUP), w1 = vload16(0, w + (long)(g + 1) * MOE_GROUP);   \
      fp4_v16sf a[N], c[N];                                                                                  \
      _Pragma("unroll") for (int m = 0; m < (N); ++m) a[m] = c[m] = zero;                                    \
      MOE_BF16_STEPS(w0, 0, a, c, N)                                                                         \
      MOE_BF16_STEPS(w1, 1, a, c, N)                                                                         \
      const float16 sv = MOE_BF16_SCALES(s + ((16 * b) / MOE_BLOCK) * MOE_GROUP);                            \
      _Pragma("unroll") for (int m = 0; m < (N); ++m)                                                        \
        acc[m] = fma(__builtin_astype(a[m], float16) + __builtin_astype(c[m], float16), sv, acc[m]);         \
    }                                                                                                        \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) out[m] = acc[m];                                         \
    return 0;                                                                                                \
  }

#define MOE_BF16_DOT2_N(NAME, N)                                                                               \
  FP4_BF16_TARGET __attribute__((noinline)) int NAME(                                                         \
      const __global uint* w1, const __global moe_scale_t* s1, const __global uint* w2,                       \
      const __global moe_scale_t* s2, int kk, int scale_exp, const __global uint* xq, int count, float16* out1, \
      float16* out2) {                                                                                         \
    MOE_BF16_ROWS_N(N)                                                                                         \
    MOE_BF16_TABLE_V;                                                                                          \
    float16 acc1[N], acc2[N];                                                                                  \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) acc1[m] = acc2[m] = (float16)(0.0f);                       \
    for (int b = 0; b < kk / 16; ++b) {                                                                        \
      MOE_PREFETCH_AT(w1, s1, b)                                                                               \
      MOE_PREFETCH_AT(w2, s2, b)                                                                               \
      const int g = 2 * b;                                                                                     \
      const long sb = (long)((16 * b) / MOE_BLOCK) * MOE_GROUP;                                                \
      const uint16 u0 = vload16(0, w1 + (long)g * MOE_GROUP), u1 = vload16(0, w1 + (long)(g + 1) * MOE_GROUP);   \
      const uint16 v0 = vload16(0, w2 + (long)g * MOE_GROUP), v1 = vload16(0, w2 + (long)(g + 1) * MOE_GROUP);   \
      fp4_v16sf a[N], c[N], e[N], f[N];                                                                        \
      _Pragma("unroll") for (int m = 0; m < (N); ++m) a[m] = c[m] = e[m] = f[m] = zero;                        \
      MOE_BF16_STEPS(u0, 0, a, c, N)                                                                           \
      MOE_BF16_STEPS(v0, 0, e, f, N)                                                                           \
      MOE_BF16_STEPS(u1, 1, a, c, N)                                                                           \
      MOE_BF16_STEPS(v1, 1, e, f, N)                                                                           \
      const float16 sv1 = MOE_BF16_SCALES(s1 + sb), sv2 = MOE_BF16_SCALES(s2 + sb);                              \
      _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                                        \
        acc1[m] = fma(__builtin_astype(a[m], float16) + __builtin_astype(c[m], float16), sv1, acc1[m]);        \
        acc2[m] = fma(__builtin_astype(e[m], float16) + __builtin_astype(f[m], float16), sv2, acc2[m]);        \
      }                                                                                                        \
    }                                                                                                          \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                                          \
      out1[m] = acc1[m];                                                                                       \
      out2[m] = acc2[m];                                                                                       \
    }                                                                                                          \
    return 0;                                                                                                  \
  }
#endif

// Software prefetch for the 8-lane layout's few-pair loops below (MOE_INTDOT, MOE_SCALEDX): the
// block's line of 8 rows' words MOE_PREFETCH8 blocks ahead into L2, and every 4th block the line
// of scales as far ahead (as MOE_PREFETCH, for this layout). Never faults; x86 only (other OpenCL
// compilers, NVIDIA's among them, take no __global pointer in __builtin_prefetch).
#ifndef MOE_PREFETCH8
#define MOE_PREFETCH8 64
#endif
// The block scale of step b of 16 elements (MXFP4: a block of 32 is two steps).
#define MOE_STEP_SCALE(b) ((b) / (MOE_BLOCK / 16))
#if defined(__x86_64__) && MOE_PREFETCH8 > 0
#define MOE_PREFETCH8_AT(w, s, b)                                                                    \
  __builtin_prefetch((const __global char*)((w) + (long)(2 * ((b) + MOE_PREFETCH8)) * MOE_GROUP), 0, 2); \
  if (((b) & 3) == 0)                                                                                \
    __builtin_prefetch((const __global char*)((s) + (long)MOE_STEP_SCALE((b) + MOE_PREFETCH8) * MOE_GROUP), 0, 2);
#else
#define MOE_PREFETCH8_AT(w, s, b)
#endif

// The few-pair loops of the 8-lane layout below (MOE_INTDOT, MOE_SCALEDX) share one shape: ROWS(N)
// finds the N pairs' activation rows in xq (pairs past `count` repeat the last), and for each block
// b of 16 elements BLOCK(w, s, acc, N) adds the block's contribution of one matrix (weights w,
// scales s) to the pairs' accumulators acc: FC2 one matrix, FC1 gate and up against the same rows.
// Each accumulator takes its blocks in block order, whatever N is.
#define MOE_FEW_DOT_N(NAME, N, ROWS, BLOCK)                                                      \
  inline void NAME(const __global uint* w, const __global moe_scale_t* s, int kk, int scale_exp, \
                   const __global uint* xq, int count, float8* out) {                            \
    ROWS(N)                                                                                      \
    float8 acc[N];                                                                               \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) acc[m] = (float8)(0.0f);                     \
    for (int b = 0; b < kk / 16; ++b) {                                                          \
      MOE_PREFETCH8_AT(w, s, b)                                                                  \
      BLOCK(w, s, acc, N)                                                                        \
    }                                                                                            \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) out[m] = acc[m];                             \
  }
#define MOE_FEW_DOT2_N(NAME, N, ROWS, BLOCK)                                                     \
  inline void NAME(const __global uint* w1, const __global moe_scale_t* s1, const __global uint* w2, \
                   const __global moe_scale_t* s2, int kk, int scale_exp, const __global uint* xq, int count, \
                   float8* out1, float8* out2) {                                                 \
    ROWS(N)                                                                                      \
    float8 acc1[N], acc2[N];                                                                     \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) acc1[m] = acc2[m] = (float8)(0.0f);          \
    for (int b = 0; b < kk / 16; ++b) {                                                          \
      MOE_PREFETCH8_AT(w1, s1, b)                                                                \
      MOE_PREFETCH8_AT(w2, s2, b)                                                                \
      BLOCK(w1, s1, acc1, N)                                                                     \
      BLOCK(w2, s2, acc2, N)                                                                     \
    }                                                                                            \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                            \
      out1[m] = acc1[m];                                                                         \
      out2[m] = acc2[m];                                                                         \
    }                                                                                            \
  }

// Tiles of few pairs by integer dot products (MOE_INTDOT): moe_int_dot.cl.
#include "moe_int_dot.cl"

// Tiles of few pairs under NVFP4 W4A16 on 8-lane CPU vectors with scaled activations (MOE_SCALEDX;
// the host defines MOE_SCALED_X: host/kernels/moe_build_options.cpp). The float decode above
// multiplies every decoded weight e2m1 × 2^-126 by its block scale before the FMA, so that the
// product is a normal number; here the activations' producers write, beside x1 and x2, each row
// with every 8-element chunk scaled by 2^(126 - E) (E the exponent of the chunk's largest
// magnitude; as linear_gemv_denorm.cl's pre-pass), so the decoded weight meets the activation
// directly and the product e2m1 · x · 2^-E is normal (but for elements ~2^125 below their chunk's
// largest); each chunk's sum then meets 2^E, and each block's the block scales. Per 64 weights
// and pair: 8 × (shift, shift, mask, FMA) and one FMA, against 8 × (shift, shift, mask, multiply,
// FMA). Rows in x1q / x2q: kk floats, then kk/8 floats 2^E (moe_sx_store8). Tiles of up to
// MOE_SX_MAX_PAIRS pairs; larger tiles and batch-invariant builds keep the float decode.
#if defined(MOE_SCALED_X) && MOE_VEC == 8 && MOE_GROUP == 8 && defined(MOE_NVFP4) && \
    !defined(MOE_BATCH_INVARIANT) && MOE_E2M1_EXP == -126
#define MOE_SCALEDX 1
#define MOE_SX_MAX_PAIRS 4
#else
#define MOE_SCALEDX 0
#define MOE_SX_MAX_PAIRS 0
#endif
#include "moe_scaled_x.cl"

#if MOE_SCALEDX
// One word vector g (8 elements of the 8 rows) against pair m's chunk g: two FMA chains (even and
// odd elements), their sum times the chunk's 2^E added to t.
#define MOE_SX_WORD(word, t, m, g)                                                              \
  {                                                                                              \
    float8 e0 = (float8)(0.0f), e1 = (float8)(0.0f);                                             \
    _Pragma("unroll") for (int j = 0; j < 8; j += 2) {                                           \
      e0 = fma(moe_e2m1(word, j), (float8)(xr[m][8 * (g) + j]), e0);                             \
      e1 = fma(moe_e2m1(word, j + 1), (float8)(xr[m][8 * (g) + j + 1]), e1);                     \
    }                                                                                            \
    t = fma(e0 + e1, (float8)(xr[m][kk + (g)]), t);                                              \
  }
#define MOE_SX_ROWS(N)                                                                           \
  const __global float* xr[N];                                                                   \
  _Pragma("unroll") for (int m = 0; m < (N); ++m)                                                \
    xr[m] = (const __global float*)xq + (long)min(m, count - 1) * MOE_SX_ROW(kk);
// Block b: the block's two word vectors (8 elements each of the 8 rows) against each pair's two
// chunks, times the block scales. (Locals end in _: the skeletons pass w1 and s1 as w and s.)
#define MOE_SX_BLOCK(w, s, acc, N)                                                               \
  {                                                                                              \
    const uint8 sx_even_ = vload8(0, (w) + (long)(2 * b) * MOE_GROUP);                          \
    const uint8 sx_odd_ = vload8(0, (w) + (long)(2 * b + 1) * MOE_GROUP);                        \
    const float8 sv = moe_block_scales((s) + b * MOE_GROUP, scale_exp + MOE_E2M1_EXP);           \
    _Pragma("unroll") for (int m = 0; m < (N); ++m) {                                            \
      float8 t = (float8)(0.0f);                                                                 \
      MOE_SX_WORD(sx_even_, t, m, 2 * b)                                                         \
      MOE_SX_WORD(sx_odd_, t, m, 2 * b + 1)                                                      \
      acc[m] = fma(t, sv, acc[m]);                                                               \
    }                                                                                            \
  }
#define MOE_SX_DOT_N(NAME, N) MOE_FEW_DOT_N(NAME, N, MOE_SX_ROWS, MOE_SX_BLOCK)
#define MOE_SX_DOT2_N(NAME, N) MOE_FEW_DOT2_N(NAME, N, MOE_SX_ROWS, MOE_SX_BLOCK)
#endif

// BF16 rounding (to nearest even) of each lane, kept as fp32; NaN stays NaN.
inline floatV moe_round_bf16(floatV v) {
  const intV u = as_intV(v);
  const intV rounded = (u + 0x7FFF + ((u >> 16) & 1)) & (int)0xFFFF0000;
  return as_floatV(select(rounded, u | 0x00400000, isnan(v)));
}

inline floatV moe_silu(floatV g) { return g / (1.0f + exp(-g)); }

// FC1's activation of a pair's gate and up sums g, u (dequant factors and biases applied):
// SwiGLU, silu(g) · u, or with MOE_ACT_CLAMPED gpt-oss's clamped form (vLLM's
// swigluoai_and_mul): g' = min(g, limit), u' = clamp(u, -limit, limit), then
// g' / (1 + e^(-alpha · g')) · (u' + 1), with alpha = MOE_ACT_ALPHA and limit = MOE_ACT_LIMIT
// (fp32 literals). NaN stays NaN through the clamps, as in PyTorch.
inline floatV moe_act(floatV g, floatV u) {
#if MOE_ACT_CLAMPED
  const floatV limit = (floatV)(MOE_ACT_LIMIT);
  const floatV gc = select(g, limit, g > limit);
  const floatV uc = select(select(u, limit, u > limit), -limit, u < -limit);
  return gc / (1.0f + exp(-(MOE_ACT_ALPHA) * gc)) * (uc + 1.0f);
#else
  return moe_silu(g) * u;
#endif
}

// The BF16 activation of rows r .. r + MOE_VEC - 1 of expert e's FC1 (`inter` rows a matrix):
// the gate and up sums times their factors f, plus (MOE_BIAS) their biases, fc1_bias [E, 2, I]
// fp32 (gate rows, then up rows).
inline floatV moe_fc1_act(floatV g, floatV u, float2 f, __global const float* fc1_bias, int e, int inter, int r) {
  g = g * f.x;
  u = u * f.y;
#if MOE_BIAS
  g += moe_loadV(fc1_bias + (long)e * 2 * inter + r);
  u += moe_loadV(fc1_bias + ((long)e * 2 + 1) * inter + r);
#else
  (void)fc1_bias, (void)e, (void)inter, (void)r;
#endif
  return moe_round_bf16(moe_act(g, u));
}

// FC2's output rows n .. n + MOE_VEC - 1 of a pair of expert e: its sums d times the factor f,
// plus (MOE_BIAS) the expert's bias, fc2_bias [E, H] fp32.
inline floatV moe_fc2_out(floatV d, float f, __global const float* fc2_bias, int e, int hidden, int n) {
#if MOE_BIAS
  return d * f + moe_loadV(fc2_bias + (long)e * hidden + n);
#else
  (void)fc2_bias, (void)e, (void)hidden, (void)n;
  return d * f;
#endif
}

// Prefill panels (CPU layouts: MOE_VEC >= 8, i.e. SIMD vectors of rows). An expert that received
// more pairs than one tile holds is served by "runs" of up to MOE_PANEL_TILES consecutive tiles:
// the work-group of a run's first tile decodes its rows' weights once per MOE_PANEL_K-element
// slice of K into local memory (each work-item its own slice) and multiplies that decoded panel
// with every pair of the run, MOE_TILE_M pairs at a time in registers; the work-groups of the
// run's other tiles do nothing. The decode (4 vector instructions per element) is then paid once
// per MOE_PANEL_TILES·MOE_TILE_M pairs instead of once per MOE_TILE_M, and the inner loop is a
// load of decoded weights and MOE_TILE_M FMAs. Each output is still one FMA chain over k in
// order with the same decoded values, so a pair's result does not depend on the run it is in.
// GPUs (MOE_VEC < 8) and the decode strategy's one-pair tiles keep one tile per work-group.
// MOE_NO_PANEL turns panels off.
#if MOE_VEC >= 8 && MOE_TILE_M >= 4 && !defined(MOE_NO_PANEL)
#define MOE_PANEL 1
#ifndef MOE_PANEL_K
#define MOE_PANEL_K 256
#endif
#ifndef MOE_PANEL_TILES
#define MOE_PANEL_TILES 4
#endif
#else
#define MOE_PANEL 0
#endif

#if MOE_PANEL
// The run the work-group of `tile` serves: returns its number of tiles (0: another work-group
// serves this tile; 1 with *pairs = the tile's count: an expert with a single tile, served the
// usual way) and the run's pair count. Tiles of one expert are consecutive and full but for the
// last (moe_dispatch.cl), so the run's slots are contiguous from the tile's first slot.
inline int moe_panel_run(__global const int* tiles, int num_tiles, int tile, int* pairs) {
  const int e = tiles[3 * tile];
  int first = tile;
  while (first > 0 && tiles[3 * (first - 1)] == e) --first;
  int last = tile;
  while (last + 1 < num_tiles && tiles[3 * (last + 1)] == e && last - tile + 1 < MOE_PANEL_TILES) ++last;
  *pairs = tiles[3 * tile + 2];
  if (first == last && (tile + 1 >= num_tiles || tiles[3 * (tile + 1)] != e)) return 1;
  if ((tile - first) % MOE_PANEL_TILES != 0) return 0;
  for (int t = tile + 1; t <= last; ++t) *pairs += tiles[3 * t + 2];
  return last - tile + 1;
}

// Decodes elements k0 .. k0+kn-1 (whole blocks) of the work-item's rows into panel[k - k0].
inline void moe_panel_decode(const __global uint* w, const __global moe_scale_t* s, int scale_exp, int k0, int kn,
                             __local float* panel) {
  for (int b = k0 / MOE_BLOCK; b < (k0 + kn) / MOE_BLOCK; ++b) {
    const floatV sv = moe_block_scales(s + b * MOE_GROUP, scale_exp);
    for (int q = 0; q < MOE_BLOCK / 8; ++q) {
      const int g = b * (MOE_BLOCK / 8) + q;
      const uintV word = moe_loadV(w + (long)g * MOE_GROUP);
#pragma unroll
      for (int j = 0; j < 8; ++j) moe_storeV(moe_e2m1(word, j) * sv, panel + (8 * g + j - k0) * MOE_VEC);
    }
  }
}
#endif

#endif  // FP4CL_MOE_FP4_VEC_CL
