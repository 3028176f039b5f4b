// FP4 number formats: E2M1 (FP4 element), E4M3fn (NVFP4 block scale), E8M0 (MXFP4 block scale)
// and BF16 (storage only). One definition for the device and the host: OpenCL C compiles this
// file inside the kernels, and host/formats/codecs.cpp compiles it as C++. Every function is
// bit-manipulation or exact arithmetic, so host and device agree bit for bit.
// Numerics: ../shared/spec/FP4.md §1–§2.
#ifndef FP4CL_COMMON_FORMATS_CL
#define FP4CL_COMMON_FORMATS_CL

#ifdef __OPENCL_VERSION__
#define FP4CL_FN inline
#define FP4CL_CONSTANT __constant
#define fp4cl_as_float(u) as_float(u)
#define fp4cl_as_uint(f) as_uint(f)
#define fp4cl_rint(f) rint(f)
#define fp4cl_fabs(f) fabs(f)
#define fp4cl_isnan(f) isnan(f)
#define FP4CL_U32 uint
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#define FP4CL_FN inline
#define FP4CL_CONSTANT static constexpr
#define FP4CL_U32 std::uint32_t
inline float fp4cl_as_float(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline std::uint32_t fp4cl_as_uint(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float fp4cl_rint(float f) { return std::nearbyint(f); }  // default rounding: nearest-even
inline float fp4cl_fabs(float f) { return std::fabs(f); }
inline bool fp4cl_isnan(float f) { return std::isnan(f); }
#endif

// ---- E2M1: S E1 E0 M, bias 1, no Inf/NaN. 0x8 is negative zero (decodes as -0.0).
FP4CL_CONSTANT float fp4cl_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

FP4CL_FN float e2m1_decode(FP4CL_U32 code) { return fp4cl_e2m1_values[code & 15u]; }

// Round to nearest, ties to even, saturating at ±6. The sign bit follows the input's sign
// (so -0.1 gives 0x8, negative zero, as ModelOpt and compressed-tensors write it). NaN saturates
// to ±6 (E2M1 has no NaN); the quantization recipes never produce a NaN input.
FP4CL_FN FP4CL_U32 e2m1_encode(float x) {
  const FP4CL_U32 sign = (fp4cl_as_uint(x) >> 28) & 8u;
  const float a = fp4cl_fabs(x);
  FP4CL_U32 m;
  if (a <= 0.25f) m = 0u;
  else if (a < 0.75f) m = 1u;
  else if (a <= 1.25f) m = 2u;
  else if (a < 1.75f) m = 3u;
  else if (a <= 2.5f) m = 4u;
  else if (a < 3.5f) m = 5u;
  else if (a <= 5.0f) m = 6u;
  else m = 7u;  // > 5, +Inf and NaN
  return sign | m;
}

// ---- E4M3fn: S EEEE MMM, bias 7, no Inf, 0x7F/0xFF NaN, max finite 448.
FP4CL_FN float e4m3_decode(FP4CL_U32 byte) {
  const FP4CL_U32 sign = (byte & 0x80u) << 24;
  const FP4CL_U32 e = (byte >> 3) & 15u, m = byte & 7u;
  if (e == 15u && m == 7u) return fp4cl_as_float(sign | 0x7FC00000u);
  if (e == 0u) return fp4cl_as_float(sign | fp4cl_as_uint((float)m * 0.001953125f));  // m * 2^-9
  return fp4cl_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// Saturating encode ("satfinite"): |x| clamped to 448, then round to nearest even; sign kept;
// NaN → 0x7F with the sign. For block scales (x ≥ 0) this is the FP4.md contract.
FP4CL_FN FP4CL_U32 e4m3_encode(float x) {
  const FP4CL_U32 sign = (fp4cl_as_uint(x) >> 24) & 0x80u;
  const float a = fp4cl_fabs(x);
  if (fp4cl_isnan(a)) return sign | 0x7Fu;
  if (a >= 448.0f) return sign | 0x7Eu;
  if (a < 0.015625f) {  // below 2^-6: subnormal step 2^-9; exact scaling, then RNE (8 = 2^-6 is 0x08)
    return sign | (FP4CL_U32)fp4cl_rint(a * 512.0f);
  }
  const FP4CL_U32 u = fp4cl_as_uint(a);
  const FP4CL_U32 r = u + 0x7FFFFu + ((u >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
  return sign | ((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}

// ---- E8M0: unsigned biased exponent, 2^(b-127); 0xFF is NaN. 0x00 is 2^-127 (an fp32 subnormal).
FP4CL_FN float e8m0_decode(FP4CL_U32 byte) {
  byte &= 0xFFu;
  if (byte == 0xFFu) return fp4cl_as_float(0x7FC00000u);
  if (byte == 0u) return fp4cl_as_float(0x00400000u);
  return fp4cl_as_float(byte << 23);
}

// Nearest power of two, the significand rounded half up (x = 1.5·2^e gives 2^(e+1), as ml_dtypes'
// float8_e8m0fnu cast does), saturating: values below 2^-127 (±0 included) give 0x00, values from
// 1.5·2^127 up (+Inf included) give 0xFE. E8M0 is unsigned: negative numbers and NaN give 0xFF.
// (The MXFP4 recipe chooses its scale by its own rule, mxfp4_scale_byte in quant_recipe.cl.)
FP4CL_FN FP4CL_U32 e8m0_encode(float x) {
  if (fp4cl_isnan(x) || x < 0.0f) return 0xFFu;
  const FP4CL_U32 u = fp4cl_as_uint(fp4cl_fabs(x));
  if (u < 0x00800000u) return u >= 0x00600000u ? 1u : 0u;  // below 2^-126: 2^-127 or 2^-126
  if (u >= 0x7F400000u) return 0xFEu;                      // 1.5·2^127 and above
  return (u + 0x00400000u) >> 23;
}

// ---- BF16: the upper 16 bits of an IEEE float32.
FP4CL_FN float bf16_to_float(FP4CL_U32 bits) { return fp4cl_as_float((bits & 0xFFFFu) << 16); }

// Round to nearest, ties to even; NaN stays NaN (quietened), ±Inf stays ±Inf.
FP4CL_FN FP4CL_U32 float_to_bf16(float f) {
  const FP4CL_U32 u = fp4cl_as_uint(f);
  if (fp4cl_isnan(f)) return (u >> 16) | 0x40u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

#endif  // FP4CL_COMMON_FORMATS_CL
