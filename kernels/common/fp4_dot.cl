// Building blocks of the FP4 linear kernels (linear_gemv.cl, linear_gemm.cl): the "rows" weight
// layout, E2M1 decode with the bit trick, block-scale decode, and the epilogue.
//
// The "rows" layout (host/prepare/fp4_row_layout.cpp prepares it once, at load):
//   codes   [N, KPAD/2] bytes, KPAD = K rounded up to 64 (FP4CL_STEP), zeros in the pad;
//           element 2i in the low nibble, 2i+1 in the high nibble (the checkpoint's packing),
//           with magnitude codes 0 and 1 swapped (see fp4_high_nibbles).
//   scales  the checkpoint's block-scale bytes in the 128×4 swizzled layout (FP4.md §7).
// Activations arrive as fp32 rows "split" by linear_activations.cl: the KPAD/2 even elements of a
// row first, then its KPAD/2 odd elements, so that low nibbles pair with the even half and high
// nibbles with the odd half, each as one contiguous vector load.
//
// Exactness: every product a·w a kernel forms is exact in fp32 and only the sums round.
//   - decoded nibbles (fp4_low/high_nibbles) are the E2M1 values, at most 2 significant bits;
//   - NVFP4 block scales (E4M3) have 4 significant bits, MXFP4 ones are powers of two;
//   - activations have 8 (BF16) or 6 (W4A4: e2m1 × E4M3 scale) significant bits;
//   so every product has at most 14 bits (normal unless an activation is below 2^-125).
// MXFP4 scales are taken relative to the layer's largest block exponent E_max (fp4_block_scales),
// and the epilogue's `epilogue` factor (computed on the host) restores it with the global scales.
#ifndef FP4CL_COMMON_FP4_DOT_CL
#define FP4CL_COMMON_FP4_DOT_CL

#include "common/quant_recipe.cl"

// Elements per step of the inner loops: 32 code bytes, 4 NVFP4 blocks or 2 MXFP4 blocks, one
// aligned group of 4 scale bytes (NVFP4) or half of one (MXFP4) in the swizzled layout.
#define FP4CL_STEP 64

// The offset of row n's first scale byte in the swizzled layout; block b of the row is at
// row_base + (b / 4) * 512 + b % 4 (swizzled_scale_offset, split into row and block parts).
inline uint fp4_scale_row_base(uint n, uint kp) {
  return (n / 128u) * (kp / 4u) * 512u + (n % 32u) * 16u + ((n % 128u) / 32u) * 4u;
}

// The vector width W of the decode and of the accumulators: FP4CL_VEC = 16 (default) or 8. A
// "chunk" is W code bytes: W even elements (low nibbles) and W odd ones (high nibbles), 2W
// consecutive weights. A step holds 32 / W chunks.
#ifndef FP4CL_VEC
#define FP4CL_VEC 16
#endif
#if FP4CL_VEC == 16
typedef float16 fp4_floatv;
typedef char16 fp4_charv;
typedef uint16 fp4_uintv;
typedef uchar16 fp4_ucharv;
#define fp4_vloadv vload16
#define fp4_convert_floatv convert_float16
#define fp4_vstorev vstore16
#define fp4_as_floatv as_float16
#define fp4_as_uintv as_uint16
#define fp4_as_charv as_char16
#define fp4_convert_intv convert_int16
#define fp4_as_ushort_halfv as_ushort8
#elif FP4CL_VEC == 8
typedef float8 fp4_floatv;
typedef char8 fp4_charv;
typedef uint8 fp4_uintv;
typedef uchar8 fp4_ucharv;
#define fp4_vloadv vload8
#define fp4_convert_floatv convert_float8
#define fp4_vstorev vstore8
#define fp4_as_floatv as_float8
#define fp4_as_uintv as_uint8
#define fp4_as_charv as_char8
#define fp4_convert_intv convert_int8
#define fp4_as_ushort_halfv as_ushort4
#else
#error "FP4CL_VEC (the vector width) must be 8 or 16"
#endif
#define FP4CL_CHUNKS (32 / FP4CL_VEC)

// E2M1 decode without a table and without fp32 subnormals. The usual bit trick (sign to bit 31,
// magnitude bits to 22..24) yields e2m1 × 2^-126, and code 1 then lands on an fp32 subnormal:
// measured on PoCL (Zen 3, AVX2), multiplying by subnormals made the GEMV 2× slower. Instead the
// layout swaps magnitude codes 0 and 1 at load (fp4_row_layout.cpp), the magnitude bits get the
// exponent bias added (0x3F000000), which maps stored codes 0, 2..7 to exactly 0.5, 1, 1.5, 2, 3,
// 4, 6 (the E2M1 values of codes 1, 2..7), and stored code 1 (true zero) is masked to ±0.
// Sign-extending the byte puts the code's sign in bits 31..7 and its magnitude in bits 6..4, so
// one shift by 18 and one mask place both fields.
inline fp4_floatv fp4_high_nibbles(fp4_charv bytes) {
  const fp4_uintv d = (fp4_as_uintv(fp4_convert_intv(bytes)) << 18) & 0x81C00000u;
  const fp4_uintv zero = fp4_as_uintv((d << 1) == (fp4_uintv)0x00800000u);  // stored magnitude 1: ±0
  return fp4_as_floatv((d + 0x3F000000u) & ~zero);
}
// The low nibbles: a 16-bit shift by 4 moves every byte's low nibble into its high nibble (the
// low half of each byte then holds a neighbour's bits, which the mask drops).
inline fp4_floatv fp4_low_nibbles(fp4_charv bytes) {
  return fp4_high_nibbles(fp4_as_charv(fp4_as_ushort_halfv(bytes) << (ushort)4));
}

// A 16-entry byte table looked up per lane: lane i of the result is t[i_lane], i_lane < 16.
// Written as one table element per lane with a variable index, which LLVM turns into a byte
// shuffle (x86 pshufb: 16 lookups per instruction) where the target has one; OpenCL's shuffle()
// instead goes through memory on PoCL (measured: 12x slower).
inline char16 fp4_lut16(char16 t, uchar16 i) {
  return (char16)(t[i.s0], t[i.s1], t[i.s2], t[i.s3], t[i.s4], t[i.s5], t[i.s6], t[i.s7], t[i.s8], t[i.s9], t[i.sa],
                  t[i.sb], t[i.sc], t[i.sd], t[i.se], t[i.sf]);
}
inline char8 fp4_lut8(char16 t, uchar8 i) {
  return (char8)(t[i.s0], t[i.s1], t[i.s2], t[i.s3], t[i.s4], t[i.s5], t[i.s6], t[i.s7]);
}

// E2M1 decode of the "rows" layout through a table indexed by the stored code (the layout's swap
// of magnitude codes 0 and 1 included) of twice the E2M1 value: integers -12..12, which convert
// exactly to float (the caller halves the block scales).
#define FP4CL_ROWS_TWICE_E2M1 (char16)(1, 0, 2, 3, 4, 6, 8, 12, -1, 0, -2, -3, -4, -6, -8, -12)
#if FP4CL_VEC == 16
#define fp4_twice_e2m1_lut(i) fp4_lut16(FP4CL_ROWS_TWICE_E2M1, i)
#else
#define fp4_twice_e2m1_lut(i) fp4_lut8(FP4CL_ROWS_TWICE_E2M1, i)
#endif
// Twice the values of the low and high nibbles of `bytes`.
inline fp4_floatv fp4_twice_low_nibbles_lut(fp4_ucharv bytes) {
  return fp4_convert_floatv(fp4_twice_e2m1_lut(bytes & (uchar)15));
}
inline fp4_floatv fp4_twice_high_nibbles_lut(fp4_ucharv bytes) {
  return fp4_convert_floatv(fp4_twice_e2m1_lut(bytes >> (uchar)4));
}

// The block scales of one step of a row, one per group of 16 consecutive elements g = 0..3
// (elements 16g .. 16g+15 of the step, i.e. code bytes 8g .. 8g+7).
//   NVFP4: the four E4M3 scale bytes of the step are one aligned 32-bit word; each byte's bits
//   placed at 20..26 make the float e4m3 × 2^-120 (subnormal E4M3 included), times 2^120 exactly.
//   The layout has no negative scale (fp4_row_layout.cpp moves a scale's sign into its block's
//   codes) and no NaN (refused at load).
//   MXFP4: the two E8M0 bytes as 2^(E - E_max), built directly as the exponent field E + exp_bias
//   with exp_bias = 127 - E_max. Blocks below the representable range hold only zero codes (the
//   host checks), and the clamp keeps their scale a finite normal number.
inline float4 fp4_block_scales(const __global uchar* restrict scales, uint scale_base, uint step, int exp_bias) {
#if FP4CL_FORMAT_MXFP4
  const uint w = ((const __global ushort*)scales)[(scale_base + (step / 2u) * 512u + (step % 2u) * 2u) / 2u];
  const int2 e = clamp((int2)((int)(w & 0xFFu), (int)(w >> 8)) + exp_bias, 1, 254);
  const float2 s = as_float2(e << 23);
  return (float4)(s.x, s.x, s.y, s.y);
#else
  (void)exp_bias;
  const uint w = ((const __global uint*)scales)[(scale_base + step * 512u) / 4u];
  const uint4 b = ((uint4)(w) >> (uint4)(0u, 8u, 16u, 24u)) & 0x7Fu;
  return as_float4(b << 20) * 0x1p120f;
#endif
}

// The scales of the lanes of chunk c (0 .. FP4CL_CHUNKS-1) of a step, from its fp4_block_scales:
// a chunk of 16 bytes spans the groups 2c and 2c+1 (lanes 0-7, 8-15), a chunk of 8 bytes group c.
inline fp4_floatv fp4_chunk_scales(float4 groups, uint c) {
  const float g[4] = {groups.x, groups.y, groups.z, groups.w};
#if FP4CL_VEC == 16
  return (float16)((float8)(g[2 * c]), (float8)(g[2 * c + 1]));
#else
  return (float8)(g[c]);
#endif
}

// The epilogue of one output: y = sum × epilogue (+ bias[n]), stored as fp32 or BF16 (RNE).
inline void fp4_store_output(__global uchar* y, ulong index, float sum, float epilogue,
                             const __global float* bias, int has_bias, uint n, int out_bf16) {
  float v = sum * epilogue;
  if (has_bias) v += bias[n];
  if (out_bf16) {
    ((__global ushort*)y)[index] = (ushort)float_to_bf16(v);
  } else {
    ((__global float*)y)[index] = v;
  }
}

// The block scales of 8 rows side by side (8 bytes at s: E8M0 exponents, biased by exp_bias and
// kept normal, or E4M3 magnitudes), times `factor` (a power of two, folded into the constant).
inline float8 fp4_lane_scales8(const __global uchar* restrict s, int exp_bias, const float factor) {
  const int8 b = convert_int8(vload8(0, s));
#if FP4CL_FORMAT_MXFP4
  return as_float8(clamp(b + exp_bias, 1, 254) << 23) * factor;
#else
  (void)exp_bias;
  return as_float8(b << 20) * (0x1p120f * factor);  // E4M3 magnitude bits at 20..26: e4m3 × 2^-120
#endif
}

// The epilogue of the rows n0 .. n0 + 7 (or + 15) of token m, one per lane of `acc` (rows from
// n_rows on are not stored): the CPU GEMVs' rows side by side as vector lanes.
// has_bias is tested once, outside the loop: the vectorized loop otherwise reads bias[n0 .. n0 + 7]
// with a masked load whose mask is 0 without a bias, from the null pointer the host passes then,
// and a masked-out lane at an unmapped address costs a microcode assist on Zen 4 (measured: about
// 0.1 µs per work-item, most of a 2048 × 768 GEMV's fixed cost; README, PoCL small decode calls).
inline void fp4_store_rows8(__global uchar* y, float8 acc, uint m, uint n0, uint n_rows, float epilogue,
                            const __global float* bias, int has_bias, int out_bf16) {
  float v[8];
  vstore8(acc, 0, v);
  if (has_bias) {
    for (uint r = 0; r < 8u; ++r) {
      const uint n = n0 + r;
      if (n < n_rows) fp4_store_output(y, (ulong)m * n_rows + n, v[r], epilogue, bias, 1, n, out_bf16);
    }
  } else {
    for (uint r = 0; r < 8u; ++r) {
      const uint n = n0 + r;
      if (n < n_rows) fp4_store_output(y, (ulong)m * n_rows + n, v[r], epilogue, bias, 0, n, out_bf16);
    }
  }
}
inline void fp4_store_rows16(__global uchar* y, float16 acc, uint m, uint n0, uint n_rows, float epilogue,
                             const __global float* bias, int has_bias, int out_bf16) {
  fp4_store_rows8(y, acc.lo, m, n0, n_rows, epilogue, bias, has_bias, out_bf16);
  fp4_store_rows8(y, acc.hi, m, n0 + 8u, n_rows, epilogue, bias, has_bias, out_bf16);
}

// A deterministic horizontal sum (a fixed pairwise tree).
inline float fp4_hsum(fp4_floatv v) {
#if FP4CL_VEC == 16
  const float8 a = v.lo + v.hi;
#else
  const float8 a = v;
#endif
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}

#endif  // FP4CL_COMMON_FP4_DOT_CL
