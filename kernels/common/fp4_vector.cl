// Vector forms (16 lanes) of the FP4 codecs and the block amax, for kernels that work on whole
// blocks. OpenCL C only. Each function is bit-identical to its scalar definition in formats.cl or
// quant_recipe.cl, which the host reference uses; tests/formats compares every kernel built on
// these with the host bit for bit (all 65536 BF16 patterns pass through e2m1_encode16).
#ifndef FP4CL_COMMON_FP4_VECTOR_CL
#define FP4CL_COMMON_FP4_VECTOR_CL

#include "common/formats.cl"

// BF16 bits (ushort) → float: exact.
inline float16 bf16x16_to_float(ushort16 bits) { return as_float16(convert_uint16(bits) << 16); }

// float → BF16 bits, round to nearest even, NaN stays NaN (as float_to_bf16).
inline ushort16 float_to_bf16x16(float16 f) {
  const uint16 u = as_uint16(f);
  const uint16 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return convert_ushort16(select(rounded, (u >> 16) | 0x40u, isnan(f)));
}

// max |x_i| over the 16 lanes, NaN lanes ignored, 0 when every lane is NaN (as fp4cl_amax_step
// folded from 0: fmax returns the other operand when one is NaN).
inline float amax16(float16 x) {
  const float16 a = fabs(x);
  const float8 m8 = fmax(a.lo, a.hi);
  const float4 m4 = fmax(m8.lo, m8.hi);
  const float2 m2 = fmax(m4.lo, m4.hi);
  return fmax(fmax(m2.x, m2.y), 0.0f);
}

// The E2M1 codes of 16 elements (as fp4_encode_scaled): the magnitude of `scaled` rounded to
// nearest even and saturated (NaN → 7), the sign bit from `x`. Each comparison is -1 where it
// holds; the magnitude code is 7 minus the number of thresholds |scaled| does not pass.
inline uint16 e2m1_encode16(float16 scaled, float16 x) {
  const float16 a = fabs(scaled);
  const int16 below = (a <= 0.25f) + (a < 0.75f) + (a <= 1.25f) + (a < 1.75f) + (a <= 2.5f) + (a < 3.5f) +
                      (a <= 5.0f);
  return convert_uint16(7 + below) | ((as_uint16(x) >> 28) & 8u);
}

// 16 codes → 8 bytes, element 2i in the low nibble.
inline uchar8 pack_e2m1x16(uint16 codes) { return convert_uchar8(codes.even | (codes.odd << 4)); }

// 8 bytes → 16 codes, low nibble first.
inline uint16 unpack_e2m1x16(uchar8 packed) {
  const uint8 w = convert_uint8(packed);
  uint16 codes;
  codes.even = w & 15u;
  codes.odd = w >> 4;
  return codes;
}

// The values of 16 E2M1 codes (as e2m1_decode; code 8 is -0.0). For m = code & 7 >= 2 the value
// 2^((m >> 1) - 1) · (1 + (m & 1) / 2) has the float bits (m << 22) + (126 << 23); 1 is 0.5 and 0 is 0.
// No subnormal arithmetic, so devices that flush denormals decode it exactly too.
inline float16 e2m1_decode16(uint16 codes) {
  const uint16 m = codes & 7u;
  uint16 bits = (m << 22) + (126u << 23);
  bits = select(bits, (uint16)(126u << 23), m == 1u);
  bits = select(bits, (uint16)0u, m == 0u);
  return as_float16(bits | ((codes & 8u) << 28));
}

#endif  // FP4CL_COMMON_FP4_VECTOR_CL
