// Vector forms of the FP4 codecs and of the quantization recipe, for kernels that work on whole
// blocks. OpenCL C only. Each function is bit-identical to its scalar definition in formats.cl or
// quant_recipe.cl (the host reference uses those): tests/formats runs both on the device over every
// BF16 value and compares them.
//
// Layout conventions that keep PoCL on 8-wide AVX2 code without calls into its builtin library:
// - 16 BF16 elements are read as 8 "pairs", one uint each: element 2i in the low half, 2i+1 in the
//   high half. Even and odd elements then decode with one shift or mask, and their E2M1 codes
//   combine into packed bytes (even = low nibble) without any shuffle.
// - The recipe runs on 8 blocks at once, one block per lane.
#ifndef FP4CL_COMMON_FP4_VECTOR_CL
#define FP4CL_COMMON_FP4_VECTOR_CL

#include "common/quant_recipe.cl"

#if defined(FP4CL_DIV_VIA_FP64)
inline float8 fp4cl_div8(float8 a, float8 b) { return convert_float8(convert_double8(a) / convert_double8(b)); }
#else
inline float8 fp4cl_div8(float8 a, float8 b) { return a / b; }
#endif

// ---- BF16

inline float8 bf16_even8(uint8 pairs) { return as_float8(pairs << 16); }
inline float8 bf16_odd8(uint8 pairs) { return as_float8(pairs & 0xFFFF0000u); }

// float → BF16 bits, round to nearest even, NaN stays NaN (as float_to_bf16), in the low half.
inline uint8 float_to_bf16x8(float8 f) {
  const uint8 u = as_uint8(f);
  const uint8 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return f != f ? (u >> 16) | 0x40u : rounded;
}

// ---- Block maxima, on BF16 bits: for non-negative floats the order of the bit patterns is the
// order of the values, so the maximum of the magnitudes' bits is the bits of the maximum.

// |x| as BF16 bits, NaN replaced by 0: the maximum then ignores NaN elements and is 0 for a block
// of NaNs, as fp4cl_amax_step folded from 0 is.
inline ushort16 bf16_magnitudes16(ushort16 bits) {
  const ushort16 m = bits & (ushort)0x7FFF;
  return m > (ushort)0x7F80 ? (ushort16)0 : m;
}

#define FP4CL_MAX(a, b) ((a) > (b) ? (a) : (b))
// Lane b of the result is the maximum of the 16 lanes of m_b: a transposing reduction, 8 maxima.
inline ushort8 max_of_8x16(ushort16 m0, ushort16 m1, ushort16 m2, ushort16 m3, ushort16 m4, ushort16 m5,
                           ushort16 m6, ushort16 m7) {
  const ushort16 t01 = FP4CL_MAX((ushort16)(m0.lo, m1.lo), (ushort16)(m0.hi, m1.hi));
  const ushort16 t23 = FP4CL_MAX((ushort16)(m2.lo, m3.lo), (ushort16)(m2.hi, m3.hi));
  const ushort16 t45 = FP4CL_MAX((ushort16)(m4.lo, m5.lo), (ushort16)(m4.hi, m5.hi));
  const ushort16 t67 = FP4CL_MAX((ushort16)(m6.lo, m7.lo), (ushort16)(m6.hi, m7.hi));
  const ushort16 u03 = FP4CL_MAX((ushort16)(t01.s0123, t01.s89ab, t23.s0123, t23.s89ab),
                                 (ushort16)(t01.s4567, t01.scdef, t23.s4567, t23.scdef));
  const ushort16 u47 = FP4CL_MAX((ushort16)(t45.s0123, t45.s89ab, t67.s0123, t67.s89ab),
                                 (ushort16)(t45.s4567, t45.scdef, t67.s4567, t67.scdef));
  const ushort16 v = FP4CL_MAX((ushort16)(u03.s01, u03.s45, u03.s89, u03.scd, u47.s01, u47.s45, u47.s89, u47.scd),
                               (ushort16)(u03.s23, u03.s67, u03.sab, u03.sef, u47.s23, u47.s67, u47.sab, u47.sef));
  return FP4CL_MAX(v.even, v.odd);
}

// The maximum of the 16 lanes of m.
inline ushort max_of_16(ushort16 m) {
  const ushort8 a = FP4CL_MAX(m.lo, m.hi);
  const ushort4 b = FP4CL_MAX(a.lo, a.hi);
  const ushort2 c = FP4CL_MAX(b.lo, b.hi);
  return FP4CL_MAX(c.x, c.y);
}
#undef FP4CL_MAX

// Block maxima (BF16 magnitude bits) as floats.
inline float8 bf16_magnitudes_to_float8(ushort8 m) { return as_float8(convert_uint8(m) << 16); }

// ---- The recipe, 8 blocks at once

// e4m3_encode for a >= 0 that is not NaN (block scales): saturate at 448, subnormals by RNE of
// a · 2^9 (adding 2^23 rounds to an integer in fp32), normals by rounding the mantissa to 3 bits.
inline uint8 e4m3_encode_nonnegative8(float8 a) {
  const uint8 u = as_uint8(a);
  const uint8 r = u + 0x7FFFFu + ((u >> 20) & 1u);
  const uint8 normal = (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u);
  const uint8 subnormal = as_uint8(a * 512.0f + 0x1p23f) - 0x4B000000u;
  const uint8 finite = a < 0.015625f ? subnormal : normal;
  return a >= 448.0f ? (uint8)0x7Eu : finite;
}

// e4m3_decode for bytes 0x00..0x7E (what e4m3_encode_nonnegative8 gives).
inline float8 e4m3_decode_nonnegative8(uint8 b) {
  const uint8 e = b >> 3, m = b & 7u;
  return e == 0u ? convert_float8(as_int8(m)) * 0.001953125f : as_float8(((e + 120u) << 23) | (m << 20));
}

// nvfp4_scale_byte and nvfp4_multiplier of quant_recipe.cl, per lane.
inline uint8 nvfp4_scale_bytes8(float8 amax, float gs) {
  return e4m3_encode_nonnegative8(gs * (amax * FP4CL_ONE_SIXTH));
}
inline float8 nvfp4_multipliers8(uint8 scale_bytes, float gs) {
  const float8 sff = e4m3_decode_nonnegative8(scale_bytes);
  const float8 mult = fp4cl_div8((float8)1.0f, sff * fp4cl_div(1.0f, gs));
  return sff == 0.0f ? (float8)0.0f : mult;
}

// mxfp4_scale_byte and mxfp4_multiplier of quant_recipe.cl, per lane (amax >= 0, not NaN).
inline uint8 mxfp4_scale_bytes8(float8 amax) {
  const int8 subnormal = amax < 1.17549435e-38f;
  const uint8 u = as_uint8(subnormal ? amax * 18446744073709551616.0f : amax);
  const int8 ex = as_int8((u >> 23) & 0xFFu) - 127 + (subnormal & -64);
  int8 e = (u & 0x7FFFFFu) <= 0x400000u ? ex - 2 : ex - 1;
  e = clamp(e, -127, 127);
  uint8 byte = as_uint8(e + 127);
  byte = amax > 3.4028234663852886e38f ? (uint8)254u : byte;
  return amax > 0.0f ? byte : (uint8)0u;
}
inline float8 mxfp4_multipliers8(uint8 scale_bytes) {
  return scale_bytes == 254u ? (float8)as_float(0x00400000u) : as_float8((254u - scale_bytes) << 23);
}

// ---- E2M1

// The magnitude code of each lane, round to nearest even, saturating, NaN → 7 (as e2m1_encode):
// 7 minus the number of thresholds |s| does not pass (a comparison is -1 where it holds).
inline uint8 e2m1_magnitudes8(float8 s) {
  const float8 a = fabs(s);
  const int8 below = (a <= 0.25f) + (a < 0.75f) + (a <= 1.25f) + (a < 1.75f) + (a <= 2.5f) + (a < 3.5f) + (a <= 5.0f);
  return as_uint8(7 + below);
}

// The 8 packed bytes (as a uint2) of the 16 elements `pairs` holds, each scaled by `multiplier`
// (as fp4_encode_scaled: the sign bit from the element).
inline uint2 e2m1_encode_pairs8(uint8 pairs, float multiplier) {
  const uint8 even = e2m1_magnitudes8(bf16_even8(pairs) * multiplier) | ((pairs >> 12) & 8u);
  const uint8 odd = e2m1_magnitudes8(bf16_odd8(pairs) * multiplier) | ((pairs >> 28) & 8u);
  return as_uint2(convert_uchar8(even | (odd << 4)));
}

// The values of 8 E2M1 codes (as e2m1_decode; code 8 is -0.0). For m = code & 7 >= 2 the value
// 2^((m >> 1) - 1) · (1 + (m & 1) / 2) has the float bits (m << 22) + (126 << 23); 1 is 0.5 and 0 is 0.
// No subnormal arithmetic, so devices that flush denormals decode exactly too.
inline float8 e2m1_decode8(uint8 codes) {
  const uint8 m = codes & 7u;
  uint8 bits = m == 1u ? (uint8)(126u << 23) : (m << 22) + (126u << 23);
  bits = m == 0u ? (uint8)0u : bits;
  return as_float8(bits | ((codes & 8u) << 28));
}

#endif  // FP4CL_COMMON_FP4_VECTOR_CL
