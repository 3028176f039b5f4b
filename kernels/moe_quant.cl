// The MoE layer's activation quantization (W4A4): one FP4 block with the shared recipe
// (common/quant_recipe.cl, FP4.md §3 NVFP4 and §4 MXFP4), written as e2m1 × block scale — exact
// in fp32; the global scale's inverse is part of the next GEMM's row factor. Used for the FC1
// input (moe_gather, moe_gather_pairs, the MMA FC1's in-kernel quantization) and the FC2 input
// (moe_fc1, moe_mma.cl's FC1), and by the linear layers' W4A4 activations (linear_activations.cl's
// split and BF16 rows, linear_mma.cl's in-kernel quantization): one block function, so each
// route gives the same bits.
//
// Build-time parameters: MOE_NVFP4 (else MXFP4; the linear kernels define it from
// FP4CL_FORMAT_MXFP4). Kernels that include this file need exact fp32 division
// (host/kernels/moe_build_options.hpp, host/cl/exact_division.hpp).
#ifndef FP4CL_MOE_QUANT_CL
#define FP4CL_MOE_QUANT_CL

#include "common/bf16.cl"
#include "common/quant_recipe.cl"

#ifdef MOE_NVFP4
#define MOE_QUANT_BLOCK 16
#else
#define MOE_QUANT_BLOCK 32
#endif

// v: the block's values (BF16 numbers); gs: the NVFP4 quant-direction global scale (ignored by
// MXFP4); out: global or (the _local variant) local memory.
#ifdef MOE_NVFP4
#define MOE_QUANT_SCALE(amax, gs, mult, s)        \
  const uint sb = nvfp4_scale_byte(amax, gs);     \
  const float mult = nvfp4_multiplier(sb, gs), s = e4m3_decode(sb)
#else
#define MOE_QUANT_SCALE(amax, gs, mult, s) \
  const uint sb = mxfp4_scale_byte(amax);  \
  const float mult = mxfp4_multiplier(sb), s = e8m0_decode(sb);  \
  (void)gs
#endif
#define MOE_QUANTIZE_BLOCK(name, space)                                                            \
  inline void name(const float* v, float gs, space float* out) {                                  \
    float amax = 0.0f;                                                                             \
    for (int i = 0; i < MOE_QUANT_BLOCK; ++i) amax = fp4cl_amax_step(amax, v[i]);                  \
    MOE_QUANT_SCALE(amax, gs, mult, s);                                                            \
    for (int i = 0; i < MOE_QUANT_BLOCK; ++i) out[i] = e2m1_decode(fp4_encode_scaled(v[i], mult)) * s; \
  }
// Sixteen lanes of a block (float16), the values of moe_quantize_block lane by lane (its scalar
// loops stay scalar on PoCL: at qwen3-30b-a3b W4A4 the gather took 22-40 µs of a one-token call,
// 160-250 µs at T = 8). moe_amax16: the lanes' largest magnitude, NaN lanes counting as 0 (a NaN
// never compares greater in fp4cl_amax_step). moe_e2m1_signed16: e2m1_encode's value of v × mult
// with v's sign (fp4_encode_scaled, decoded), its thresholds as masks, each written ~(a <= t) or
// ~(a < t) so that a NaN product takes the largest magnitude, 6, as there.
inline float moe_amax16(float16 v) {
  const float16 an = select(fabs(v), (float16)(0.0f), isnan(v));
  const float8 m8 = select(an.lo, an.hi, an.hi > an.lo);
  const float4 m4 = select(m8.lo, m8.hi, m8.hi > m8.lo);
  const float2 m2 = select(m4.lo, m4.hi, m4.hi > m4.lo);
  return m2.y > m2.x ? m2.y : m2.x;
}
// One macro for 16 values and for 2 (moe_e2m1_signed2): selects, no table (e2m1_decode's table of
// E2M1 values, indexed by each lane's code, is a serialized constant-memory read on NVIDIA).
#define MOE_E2M1_SIGNED(n)                                                   \
  inline float##n moe_e2m1_signed##n(float##n v, float mult) {                \
    const float##n a = fabs(v * mult);                                       \
    float##n mag = (float##n)(0.0f);                                         \
    mag = select(mag, (float##n)(0.5f), ~(a <= 0.25f));                      \
    mag = select(mag, (float##n)(1.0f), ~(a < 0.75f));                       \
    mag = select(mag, (float##n)(1.5f), ~(a <= 1.25f));                      \
    mag = select(mag, (float##n)(2.0f), ~(a < 1.75f));                       \
    mag = select(mag, (float##n)(3.0f), ~(a <= 2.5f));                       \
    mag = select(mag, (float##n)(4.0f), ~(a < 3.5f));                        \
    mag = select(mag, (float##n)(6.0f), ~(a <= 5.0f));                       \
    return as_float##n(as_uint##n(mag) | (as_uint##n(v) & 0x80000000u));    \
  }
MOE_E2M1_SIGNED(16)
MOE_E2M1_SIGNED(2)
#ifdef MOE_NVFP4
// One NVFP4 block (16 values) as a float16: moe_quantize16_e2m1 gives the block's E2M1 values
// (signed) and its decoded scale *scale, whose product moe_quantize16 returns.
inline float16 moe_quantize16_e2m1(float16 v, float gs, float* scale) {
  MOE_QUANT_SCALE(moe_amax16(v), gs, mult, s);
  *scale = s;
  return moe_e2m1_signed16(v, mult);
}
inline float16 moe_quantize16(float16 v, float gs) {
  float s;
  const float16 q = moe_quantize16_e2m1(v, gs, &s);
  return q * s;
}
#endif

// The integer form of block b of 16 elements of a row of kk elements (x1q / x2q rows under
// MOE_INT_CODES, moe_int_dot.cl's MOE_INTDOT; an MXFP4 block of 32 is two of them, with the same
// scale): the codes 2·e2m1 (exact small integers; -0 is 0) as int8, each 8
// ordered (0, 2, 4, 6, 1, 3, 5, 7), at byte 16b; the block's offset -12 · (their sum: the
// weights' codes are 2·e2m1 + 12 there) at int b from byte kk; the block's decoded scale at float b
// from byte kk + kk/4.
inline void moe_int_store_codes16(float16 e2m1, float scale, __global uint* row, int kk, int b) {
  const char16 c = convert_char16(e2m1 * 2.0f);
  vstore16((char16)(c.s0246, c.s1357, c.s8ace, c.s9bdf), 0, (__global char*)row + 16 * b);
  const int8 p = convert_int8(c.lo) + convert_int8(c.hi);
  const int4 q = p.lo + p.hi;
  ((__global int*)((__global char*)row + kk))[b] = -12 * (q.x + q.y + q.z + q.w);
  ((__global float*)((__global char*)row + kk + kk / 4))[b] = scale;
}
MOE_QUANTIZE_BLOCK(moe_quantize_block, __global)
MOE_QUANTIZE_BLOCK(moe_quantize_block_local, __local)
MOE_QUANTIZE_BLOCK(moe_quantize_block_private, __private)

// The same values as BF16 pairs (exact: e2m1 × an E4M3 or E8M0 scale has at most 6 significant
// bits): out[i] = value 2i in the low half, 2i + 1 in the high. For the MMA kernels, whose B
// fragments are BF16 pairs.
inline uint moe_bf16_pair(float lo, float hi) { return (as_uint(lo) >> 16) | (as_uint(hi) & 0xFFFF0000u); }
#define MOE_QUANTIZE_BLOCK_PAIRS(name, space)                                                   \
  inline void name(const float* v, float gs, space uint* out) {                               \
    float q[MOE_QUANT_BLOCK];                                                                 \
    moe_quantize_block_private(v, gs, q);                                                     \
    for (int i = 0; i < MOE_QUANT_BLOCK / 2; ++i) out[i] = moe_bf16_pair(q[2 * i], q[2 * i + 1]); \
  }
MOE_QUANTIZE_BLOCK_PAIRS(moe_quantize_block_pairs, __global)
MOE_QUANTIZE_BLOCK_PAIRS(moe_quantize_block_pairs_local, __local)

// One block of values v (BF16 numbers as fp32) in float16 lanes v[0 .. MOE_QUANT_BLOCK / 16 - 1]:
// their E2M1 values (signed) q[..] and the block's decoded scale *scale, whose products are
// moe_quantize_block's values. NVFP4 one lane set (moe_quantize16_e2m1), MXFP4 two under the
// block's one scale.
inline void moe_quantize_block16s_e2m1(const float16* v, float gs, float16* q, float* scale) {
#ifdef MOE_NVFP4
  q[0] = moe_quantize16_e2m1(v[0], gs, scale);
#else
  const float a0 = moe_amax16(v[0]), a1 = moe_amax16(v[1]);
  MOE_QUANT_SCALE(a1 > a0 ? a1 : a0, gs, mult, s);
  *scale = s;
  q[0] = moe_e2m1_signed16(v[0], mult);
  q[1] = moe_e2m1_signed16(v[1], mult);
#endif
}
// One block of BF16 values src [MOE_QUANT_BLOCK] quantized (moe_quantize_block's values) as
// float16 lanes q[0 .. MOE_QUANT_BLOCK / 16 - 1]. moe_quantize_bf16_pairs writes them as BF16
// pairs dst [MOE_QUANT_BLOCK / 2].
inline void moe_quantize_bf16_block(__global const ushort* src, float gs, float16* q) {
  float16 v[MOE_QUANT_BLOCK / 16];
  for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) v[i] = bf16x16(src, i);
  float s;
  moe_quantize_block16s_e2m1(v, gs, q, &s);
  for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) q[i] *= s;
}
inline uint8 moe_bf16_pairs16(float16 q) { return (as_uint16(q).even >> 16) | (as_uint16(q).odd & 0xFFFF0000u); }
#define MOE_QUANTIZE_BF16_PAIRS(name, space)                                          \
  inline void name(__global const ushort* src, float gs, space uint* dst) {          \
    float16 q[MOE_QUANT_BLOCK / 16];                                                  \
    moe_quantize_bf16_block(src, gs, q);                                              \
    for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) vstore8(moe_bf16_pairs16(q[i]), i, dst); \
  }
MOE_QUANTIZE_BF16_PAIRS(moe_quantize_bf16_pairs, __global)
MOE_QUANTIZE_BF16_PAIRS(moe_quantize_bf16_pairs_local, __local)

// BF16 pair j (values 2j and 2j + 1) of one block of fp32 values v [MOE_QUANT_BLOCK] in local
// memory, for a work-item a pair: moe_quantize_block_pairs' values, so the same bits (each takes
// the whole block's amax and scale, in the same order, and quantizes its own two values).
inline uint moe_quantize_block_pair(const __local float* v, float gs, int j) {
  float amax = 0.0f;
  for (int i = 0; i < MOE_QUANT_BLOCK; ++i) amax = fp4cl_amax_step(amax, v[i]);
  MOE_QUANT_SCALE(amax, gs, mult, s);
  const float2 q = moe_e2m1_signed2(vload2(j, v), mult) * s;
  return moe_bf16_pair(q.x, q.y);
}

#endif  // FP4CL_MOE_QUANT_CL
