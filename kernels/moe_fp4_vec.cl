// Vector pieces of the MoE expert GEMMs (included by moe_fc1.cl and moe_fc2.cl).
//
// A weight row is read 16 bytes (32 FP4 elements) at a time. Element 2i sits in the low nibble
// of byte i, element 2i+1 in the high nibble (FP4.md §2), so the 16 low nibbles pair with the
// 16 even activations and the 16 high nibbles with the 16 odd ones: activations are stored
// pre-split, each row as [even half | odd half] (moe_gather and moe_fc1 write them so).
//
// E2M1 codes are decoded with the bit trick of FP4.md §1: as_float(sign << 31 | code << 22)
// = e2m1 × 2^-126 (codes ±0.5 are fp32 subnormals: devices without fp32 denormals build with
// MOE_E2M1_NO_DENORM, which decodes the exact value instead; the host folds whichever power of
// two into the row factor). The block scale is decoded once per block as s × 2^scale_exp and
// applied to the decoded weights before they meet the activations, so every product stays a
// normal fp32 number: weight × scale = e2m1 × s × 2^(scale_exp + MOE_E2M1_EXP).
//
// Build-time parameters: MOE_NVFP4 (else MXFP4).
#ifndef FP4CL_MOE_FP4_VEC_CL
#define FP4CL_MOE_FP4_VEC_CL

#include "common/formats.cl"

#ifndef MOE_E2M1_NO_DENORM
#define MOE_E2M1_EXP (-126)
inline float16 moe_e2m1_low(uint16 b) { return as_float16(((b & 8u) << 28) | ((b & 7u) << 22)); }
inline float16 moe_e2m1_high(uint16 b) { return as_float16(((b & 0x80u) << 24) | ((b & 0x70u) << 18)); }
inline float8 moe_e2m1_low8(uint8 b) { return as_float8(((b & 8u) << 28) | ((b & 7u) << 22)); }
inline float8 moe_e2m1_high8(uint8 b) { return as_float8(((b & 0x80u) << 24) | ((b & 0x70u) << 18)); }
#else
#define MOE_E2M1_EXP 0
// Codes 2..7 through the exponent (base 126); codes 0 and 1 (0 and 0.5) by a select.
inline float16 moe_e2m1_value16(uint16 c) {
  const float16 big = as_float16(((c & 7u) << 22) + (126u << 23));
  const float16 small = convert_float16(c & 1u) * 0.5f;
  return as_float16(as_uint16(select(big, small, (c & 6u) == 0u)) | ((c & 8u) << 28));
}
inline float8 moe_e2m1_value8(uint8 c) {
  const float8 big = as_float8(((c & 7u) << 22) + (126u << 23));
  const float8 small = convert_float8(c & 1u) * 0.5f;
  return as_float8(as_uint8(select(big, small, (c & 6u) == 0u)) | ((c & 8u) << 28));
}
inline float16 moe_e2m1_low(uint16 b) { return moe_e2m1_value16(b & 15u); }
inline float16 moe_e2m1_high(uint16 b) { return moe_e2m1_value16(b >> 4); }
inline float8 moe_e2m1_low8(uint8 b) { return moe_e2m1_value8(b & 15u); }
inline float8 moe_e2m1_high8(uint8 b) { return moe_e2m1_value8(b >> 4); }
#endif

// A block scale byte decoded as s × 2^scale_exp (the host keeps the result a normal fp32 number).
#ifdef MOE_NVFP4
#define MOE_BLOCK 16
inline float moe_block_scale(uint b, int scale_exp) {
  const uint em = b & 0x7Fu;
  const float normal = as_float((em << 20) + ((uint)(scale_exp + 120) << 23));
  const float subnormal = (float)(em & 7u) * as_float((uint)(scale_exp - 9 + 127) << 23);
  return as_float(as_uint((em >> 3) != 0u ? normal : subnormal) | ((b & 0x80u) << 24));
}
// The scales of the 32 elements at chunk j of a row: blocks 2j (bytes 0..7) and 2j+1.
inline float16 moe_chunk_scales(const __global uchar* row_scales, int j, int scale_exp) {
  const float8 s0 = (float8)(moe_block_scale(row_scales[2 * j], scale_exp));
  const float8 s1 = (float8)(moe_block_scale(row_scales[2 * j + 1], scale_exp));
  return (float16)(s0, s1);
}
#else
#define MOE_BLOCK 32
inline float moe_block_scale(uint b, int scale_exp) { return as_float((b + (uint)scale_exp) << 23); }
inline float16 moe_chunk_scales(const __global uchar* row_scales, int j, int scale_exp) {
  return (float16)(moe_block_scale(row_scales[j], scale_exp));
}
#endif

inline float moe_sum16(float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}
inline float moe_sum8(float8 v) {
  const float4 b = v.lo + v.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// Scaled weights of chunk j of a row (32 elements): low = even elements, high = odd.
#define MOE_LOAD_CHUNK(row, row_scales, j, scale_exp, low, high)           \
  do {                                                                     \
    const uint16 b_ = convert_uint16(vload16((j), (row)));                 \
    const float16 s_ = moe_chunk_scales((row_scales), (j), (scale_exp));   \
    (low) = moe_e2m1_low(b_) * s_;                                         \
    (high) = moe_e2m1_high(b_) * s_;                                       \
  } while (0)

// The last 16 elements of a row whose length is an odd number of 16-blocks (NVFP4 only):
// 8 bytes at chunk index j, one block scale (block 2j).
#define MOE_LOAD_TAIL(row, row_scales, j, scale_exp, low, high)                           \
  do {                                                                                    \
    const uint8 b_ = convert_uint8(vload8(0, (row) + 16 * (j)));                          \
    const float s_ = moe_block_scale((row_scales)[2 * (j)], (scale_exp));                 \
    (low) = moe_e2m1_low8(b_) * s_;                                                       \
    (high) = moe_e2m1_high8(b_) * s_;                                                     \
  } while (0)

// BF16 rounding of an fp32 value (round to nearest even), kept as fp32.
inline float moe_round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

inline float moe_silu(float g) { return g / (1.0f + exp(-g)); }

#endif  // FP4CL_MOE_FP4_VEC_CL
