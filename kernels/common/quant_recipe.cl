// The activation quantization recipes (FP4.md §3 NVFP4, §4 MXFP4) and the 128×4 scale swizzle
// (§7), as per-block scalar steps. Like formats.cl, one definition compiled as OpenCL C inside
// the kernels and as C++ by the host reference, so host and device agree bit for bit.
//
// Exactness: the NVFP4 recipe needs IEEE (correctly rounded) fp32 division. The host builds
// kernels that include this file with -cl-fp32-correctly-rounded-divide-sqrt where the device
// offers it; otherwise it defines FP4CL_DIV_VIA_FP64 (exact: a quotient of two floats computed
// in double and rounded once to float is the correctly rounded float quotient).
#ifndef FP4CL_COMMON_QUANT_RECIPE_CL
#define FP4CL_COMMON_QUANT_RECIPE_CL

#include "common/formats.cl"

#if defined(__OPENCL_VERSION__) && defined(FP4CL_DIV_VIA_FP64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
// The divisor passes through a volatile double so that the compiler cannot shrink
// "(float)((double)a / (double)b)" back into a float division (LLVM does, and NVIDIA's OpenCL
// then lowers that float division to its approximate form: measured on an H200).
FP4CL_FN float fp4cl_div(float a, float b) {
  volatile double divisor = (double)b;
  return (float)((double)a / divisor);
}
#else
FP4CL_FN float fp4cl_div(float a, float b) { return a / b; }
#endif

// (float)(1/6), the constant of vLLM's recipe.
#define FP4CL_ONE_SIXTH 0x1.555556p-3f

// Block amax over |x|: NaN elements are ignored (a NaN never compares greater).
FP4CL_FN float fp4cl_amax_step(float amax, float x) {
  const float a = fp4cl_fabs(x);
  return a > amax ? a : amax;
}

// ---- NVFP4 (block 16): gs is the quant-direction global scale.
// Step 2: the E4M3 block-scale byte.
FP4CL_FN FP4CL_U32 nvfp4_scale_byte(float amax, float gs) { return e4m3_encode(gs * (amax * FP4CL_ONE_SIXTH)); }

// Step 3: the multiplier applied to every element of the block (0 for a zero block scale).
FP4CL_FN float nvfp4_multiplier(FP4CL_U32 scale_byte, float gs) {
  const float sff = e4m3_decode(scale_byte);
  return sff == 0.0f ? 0.0f : fp4cl_div(1.0f, sff * fp4cl_div(1.0f, gs));
}

// ---- MXFP4 (block 32), the "ceil" rule: E - 127 = ceil(log2(amax / 6)), exactly, clamped to
// [-127, 127]; an all-zero block (or one with no finite magnitude) gets E = 0 (biased).
FP4CL_FN FP4CL_U32 mxfp4_scale_byte(float amax) {
  if (!(amax > 0.0f)) return 0u;                   // zero block (or NaN): E = 0
  if (amax > 3.4028234663852886e38f) return 254u;  // +Inf: the clamp bound 2^127
  // amax = f·2^ex with f in [1, 2). The smallest e with 6·2^e = 1.5·2^(e+2) >= amax is
  // ex - 2 when f <= 1.5 and ex - 1 otherwise: exact, read off the bits.
  int bias = 0;
  if (amax < 1.17549435e-38f) {  // subnormal: scale by 2^64 (exact) to normalize
    amax *= 18446744073709551616.0f;
    bias = -64;
  }
  const FP4CL_U32 u = fp4cl_as_uint(amax);
  const int ex = (int)((u >> 23) & 0xFFu) - 127 + bias;
  int e = (u & 0x7FFFFFu) <= 0x400000u ? ex - 2 : ex - 1;
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return (FP4CL_U32)(e + 127);
}

// The multiplier 2^-(E-127) applied to every element of the block (exact power of two).
FP4CL_FN float mxfp4_multiplier(FP4CL_U32 scale_byte) {
  const int e = (int)scale_byte - 127;  // in [-127, 127]
  // 2^-e for e in [-127, 127]: normal except 2^-127 (e = 127), an fp32 subnormal.
  return e == 127 ? fp4cl_as_float(0x00400000u) : fp4cl_as_float((FP4CL_U32)(127 - e) << 23);
}

// Step 4 (both formats): the element's E2M1 code (saturating at ±6, RNE). The sign bit is taken
// from x rather than from the product: the same for every number (the multiplier is never
// negative), and it keeps a NaN element's code the same on every device (x86 keeps a NaN's sign
// through a multiply, NVIDIA GPUs return a canonical positive NaN).
FP4CL_FN FP4CL_U32 fp4_encode_scaled(float x, float multiplier) {
  return (e2m1_encode(x * multiplier) & 7u) | ((fp4cl_as_uint(x) >> 28) & 8u);
}

// ---- 128×4 swizzled scale layout (FP4.md §7). `kp` = number of scale columns padded to 4.
FP4CL_FN FP4CL_U32 swizzled_scale_offset(FP4CL_U32 m, FP4CL_U32 k, FP4CL_U32 kp) {
  return ((m / 128u) * (kp / 4u) + k / 4u) * 512u + (m % 32u) * 16u + ((m % 128u) / 32u) * 4u + (k % 4u);
}

#endif  // FP4CL_COMMON_QUANT_RECIPE_CL
