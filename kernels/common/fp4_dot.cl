// Building blocks of the FP4 linear kernels (linear_gemv.cl, linear_gemm.cl): the "rows" weight
// layout, E2M1 decode with the bit trick, block-scale decode, and the epilogue.
//
// The "rows" layout (host/prepare/fp4_row_layout.cpp prepares it once, at load):
//   codes   [N, KPAD/2] bytes, KPAD = K rounded up to 64 (FP4CL_STEP), zero codes in the pad;
//           element 2i in the low nibble, 2i+1 in the high nibble (the checkpoint's packing).
//   scales  the checkpoint's block-scale bytes in the 128×4 swizzled layout (FP4.md §7).
// The activations arrive as fp32 rows of KPAD values, "split": the KPAD/2 even elements of a row
// first, then its KPAD/2 odd elements, so that low nibbles pair with the even half and high
// nibbles with the odd half, each as one contiguous float16 load (linear_activations.cl).
//
// Exactness. A decoded weight is e2m1 × block_scale × 2^-SHIFT (NVFP4: SHIFT = 7; MXFP4: the
// layer's largest block exponent, see fp4_mx_scales), a number with at most 6 significant bits
// that is normal in fp32; its product with a BF16 activation (8 bits) or with an FP4 activation
// times its E4M3 scale (6 bits) is exact in fp32. Only the accumulation rounds. The epilogue
// multiplies by `epilogue` = 2^SHIFT × the global scales, computed on the host.
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

// E2M1 codes of the low (even element) and high (odd element) nibbles of 16 bytes as fp32 bit
// patterns: sign to bit 31, the three magnitude bits to bits 22..24. The float with those bits is
// exactly e2m1(code) × 2^-126 (code 1 lands on the fp32 subnormal 2^-127, which is why this works
// without a table: FP4.md §1). Multiplying by a scale that carries 2^126 makes it normal again.
inline float16 fp4_low_nibbles(uint16 bytes) {
  return as_float16(((bytes & 8u) << 28) | ((bytes & 7u) << 22));
}
inline float16 fp4_high_nibbles(uint16 bytes) {
  return as_float16(((bytes & 0x80u) << 24) | ((bytes & 0x70u) << 18));
}

// NVFP4: four E4M3 block-scale bytes to the multipliers of the decoded nibbles, each
// e4m3(byte) × 2^(126 - 7). The E4M3 bits placed at bits 20..27 (sign at 31) make the float
// e4m3(byte) × 2^-120, subnormal E4M3 values included; two exact power-of-two multiplies follow
// (one constant 2^239 would not be a float). NaN bytes (0x7F, 0xFF) are refused at load.
#define FP4CL_NVFP4_SHIFT 7
inline float4 fp4_nv_scales(uchar4 bytes) {
  const uint4 b = convert_uint4(bytes);
  const float4 s = as_float4(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20));
  return (s * 0x1p120f) * 0x1p119f;
}

// MXFP4: E8M0 bytes to 2^(E - 127) × 2^126 × 2^-(E_max - 127) = 2^(E - E_max + 126), built
// directly as the fp32 exponent field E + exp_bias with exp_bias = 253 - E_max (the host computes
// E_max over the blocks with a nonzero code and refuses a layer whose blocks span more than 2^125).
// Blocks below the range hold only zero codes; clamping keeps their multiplier a finite normal.
inline float2 fp4_mx_scales(uchar2 bytes, int exp_bias) {
  const int2 e = clamp(convert_int2(bytes) + exp_bias, 1, 254);
  return as_float2(e << 23);
}

// One step (64 elements) of a weight row: its 32 code bytes decoded and scaled. lo0/hi0 hold the
// even/odd elements of the first 32, lo1/hi1 those of the second 32.
typedef struct {
  float16 lo0, hi0, lo1, hi1;
} fp4_step;

// `row` points at the row's codes, `scales` at the layer's swizzled scales, `scale_base` is
// fp4_scale_row_base of the row. `exp_bias` is used by MXFP4 only.
inline fp4_step fp4_decode_step(const __global uchar* restrict row, const __global uchar* restrict scales,
                                uint scale_base, uint step, int exp_bias) {
  const uint16 b0 = convert_uint16(vload16(2 * step, row));
  const uint16 b1 = convert_uint16(vload16(2 * step + 1, row));
  float16 s0, s1;
#if FP4CL_FORMAT_MXFP4
  // Blocks 2·step and 2·step+1: bytes (step / 2) * 512 + (step % 2) * 2 and the next one.
  const float2 s = fp4_mx_scales(vload2(0, scales + scale_base + (step / 2u) * 512u + (step % 2u) * 2u), exp_bias);
  s0 = (float16)(s.x);
  s1 = (float16)(s.y);
#else
  (void)exp_bias;
  // Blocks 4·step .. 4·step+3: four contiguous bytes at (4·step / 4) * 512.
  const float4 s = fp4_nv_scales(vload4(0, scales + scale_base + step * 512u));
  s0 = (float16)((float8)(s.x), (float8)(s.y));
  s1 = (float16)((float8)(s.z), (float8)(s.w));
#endif
  fp4_step w;
  w.lo0 = fp4_low_nibbles(b0) * s0;
  w.hi0 = fp4_high_nibbles(b0) * s0;
  w.lo1 = fp4_low_nibbles(b1) * s1;
  w.hi1 = fp4_high_nibbles(b1) * s1;
  return w;
}

// A deterministic horizontal sum (a fixed pairwise tree).
inline float fp4_hsum16(float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
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

#endif  // FP4CL_COMMON_FP4_DOT_CL
