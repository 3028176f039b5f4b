// The "split layout" dot step of the GPU GEMV kernels (moe_split.cl, linear_gemv_split.cl):
// every weight row split over L lanes (work-items) of a lane group, lane l reading uint4 word l
// of each step of 32·L elements (coalesced 128-bit loads).
//
// Layout (host/prepare/fp4_split_layout.cpp makes it), per matrix [N, K] with L lanes per row
// (K a multiple of 32·L): row-major rows of K/32 uint4 words; step s of a row holds L uint4, the
// one of lane l carrying the 32 elements s·32L + 4L·q + 4l + c (q = 0..7, c = 0..3) as nibble
// 4·(q % 2) + c of component q / 2. A lane's activations for step s are thus the eight float4 at
// s·32L + 4L·q + 4l: neighbouring lanes read neighbouring activations and neighbouring weight
// words. Block scales (E4M3 or E8M0 bytes), per row: step s holds G = max(1, 4L/block) groups of
// 8 bytes, byte q of group g the scale of elements s·32L + 4L·q + g·block (lane l reads group
// 4l / block as one uint2).
//
// E2M1 decode, FP4.md §1: as_float(sign << 31 | code << 22) = e2m1 × 2^-126 (codes ±0.5 are fp32
// subnormals); FP4_SPLIT_E2M1_NO_DENORM decodes the exact values instead, for devices that flush
// fp32 denormals. Block scales are decoded as s × 2^scale_exp, so that every weight × scale
// product is a normal fp32 number; the caller folds 2^-(scale_exp + e2m1 exponent) into its
// output factor.
//
// Build-time parameters: FP4_SPLIT_NVFP4 (E4M3 scales, else MXFP4's E8M0), FP4_SPLIT_E2M1_NO_DENORM.
#ifndef FP4CL_COMMON_FP4_SPLIT_CL
#define FP4CL_COMMON_FP4_SPLIT_CL

#include "common/formats.cl"

// Scale groups of 8 bytes per step for L lanes and a block size.
#define FP4_SPLIT_GROUPS(lanes, block) (4 * (lanes) >= (block) ? 4 * (lanes) / (block) : 1)

// Element 8g + j of a word holding elements 8g..8g+7 (the same decode as moe_fp4_vec.cl's).
#ifndef FP4_SPLIT_E2M1_NO_DENORM
inline float fp4_split_e2m1(uint w, int j) { return as_float((as_int(w << (28 - 4 * j)) >> 6) & (int)0x81C00000); }
#else
inline float fp4_split_e2m1(uint w, int j) {
  const int v = as_int(w << (28 - 4 * j)) >> 6;
  const int mag = v & 0x01C00000;
  const int small = select(0, 0x3F000000, mag == 0x00400000);
  return as_float(select(mag + (126 << 23), small, mag < 0x00800000) | (v & (int)0x80000000));
}
#endif

// The eight block scales of a lane for one step, times 2^scale_exp.
inline void fp4_split_scales(uint2 bytes, int scale_exp, float* s) {
  const uint b[8] = {bytes.x & 0xFF, (bytes.x >> 8) & 0xFF, (bytes.x >> 16) & 0xFF, bytes.x >> 24,
                     bytes.y & 0xFF, (bytes.y >> 8) & 0xFF, (bytes.y >> 16) & 0xFF, bytes.y >> 24};
#if defined(FP4_SPLIT_NVFP4) && !defined(FP4_SPLIT_E2M1_NO_DENORM)
  // Bits 6..0 of the E4M3 byte at bits 26..20 make the float s × 2^-120 (a subnormal E4M3 an fp32
  // subnormal: exact where denormals are supported, which this decode path implies), the sign
  // bit at 31; times 2^120 and 2^scale_exp, both exact. (NaN bytes are refused at load.)
  const float up = as_float((scale_exp + 127) << 23);
#pragma unroll
  for (int q = 0; q < 8; ++q) s[q] = as_float(((b[q] << 20) & 0x07F00000u) | ((b[q] << 24) & 0x80000000u)) * 0x1p120f * up;
#elif defined(FP4_SPLIT_NVFP4)
  const float up = as_float((scale_exp + 127) << 23);
#pragma unroll
  for (int q = 0; q < 8; ++q) s[q] = e4m3_decode(b[q]) * up;
#else
#pragma unroll
  for (int q = 0; q < 8; ++q) s[q] = as_float(((int)b[q] + scale_exp) << 23);
#endif
}

// A lane's 32 weights of one step, decoded and scaled: wf[4q + c] is element s·32L + 4L·q + 4l + c.
inline void fp4_split_weights(uint4 w, const float* s, float* wf) {
  const uint words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint word = words[q / 2];
    const int j0 = 4 * (q % 2);
    wf[4 * q] = fp4_split_e2m1(word, j0) * s[q];
    wf[4 * q + 1] = fp4_split_e2m1(word, j0 + 1) * s[q];
    wf[4 * q + 2] = fp4_split_e2m1(word, j0 + 2) * s[q];
    wf[4 * q + 3] = fp4_split_e2m1(word, j0 + 3) * s[q];
  }
}

// Σ over a lane's 32 decoded weights wf times its activations at x (the lane's first float4; the
// others follow at a stride of 4·L floats), in a fixed order: two FMA chains (even and odd
// components), then their sum. OpenCL C 1.2 has no generic address space: the same eight steps
// for activations in local and in global memory.
#define FP4_SPLIT_DOT_Q(q)                              \
  {                                                     \
    const float4 xv = vload4(0, x + (q) * stride);      \
    acc0 = fma(wf[4 * (q)], xv.x, acc0);                \
    acc1 = fma(wf[4 * (q) + 1], xv.y, acc1);            \
    acc0 = fma(wf[4 * (q) + 2], xv.z, acc0);            \
    acc1 = fma(wf[4 * (q) + 3], xv.w, acc1);            \
  }
#define FP4_SPLIT_DOT_ALL                                                                                      \
  float acc0 = 0.0f, acc1 = 0.0f;                                                                              \
  FP4_SPLIT_DOT_Q(0) FP4_SPLIT_DOT_Q(1) FP4_SPLIT_DOT_Q(2) FP4_SPLIT_DOT_Q(3) FP4_SPLIT_DOT_Q(4)               \
  FP4_SPLIT_DOT_Q(5) FP4_SPLIT_DOT_Q(6) FP4_SPLIT_DOT_Q(7)                                                     \
  return acc0 + acc1;
inline float fp4_split_dot_local(const float* wf, const __local float* x, int stride) { FP4_SPLIT_DOT_ALL }
inline float fp4_split_dot_global(const float* wf, const __global float* x, int stride) { FP4_SPLIT_DOT_ALL }
#undef FP4_SPLIT_DOT_ALL
#undef FP4_SPLIT_DOT_Q

// One step of one lane: weights w (uint4), scales s[8], activations at x.
inline float fp4_split_dot_step_local(uint4 w, const float* s, const __local float* x, int stride) {
  float wf[32];
  fp4_split_weights(w, s, wf);
  return fp4_split_dot_local(wf, x, stride);
}
inline float fp4_split_dot_step_global(uint4 w, const float* s, const __global float* x, int stride) {
  float wf[32];
  fp4_split_weights(w, s, wf);
  return fp4_split_dot_global(wf, x, stride);
}

#endif  // FP4CL_COMMON_FP4_SPLIT_CL
