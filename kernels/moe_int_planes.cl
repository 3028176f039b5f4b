// The integer-planes form of a MoE activation row (MOE_INT_PLANES, W4A16 on 8-lane CPUs;
// moe_int_dot.cl reads it, moe_gather and moe_fc1 write it into x1q / x2q): the BF16 values of each
// chunk of C elements on its integer grid (common/int_grid.cl), C = 16 for FC1's inputs (an NVFP4
// block, half an MXFP4 one) and 8 for FC2's (moe_fc1's work-items hold 8 rows each). A row of kk
// elements: the hi plane as kk bytes, each 8 ordered (0, 2, 4, 6, 1, 3, 5, 7); from byte kk, kk/C
// ints: each chunk's offset -12 · Σq; from byte kk + 4kk/C, kk/C floats: each chunk's factor
// 2^(E - 13) (a subnormal for chunks below 2^-113: the strategy needs a device that keeps them);
// from byte kk + 8kk/C, the lo plane as kk bytes in the hi plane's order. A chunk holding NaN or
// an infinity has q = 0 and a NaN factor. MOE_IP_ROW uints a row.
#ifndef FP4CL_MOE_INT_PLANES_CL
#define FP4CL_MOE_INT_PLANES_CL
#include "common/int_grid.cl"

#define MOE_IP_ROW(kk, C) ((kk) / 2 + 2 * (kk) / (C))
#define MOE_IP_OFFSETS(x, kk, C) ((const __global int*)((const __global char*)(x) + (kk)))
#define MOE_IP_FACTORS(x, kk, C) ((const __global float*)((const __global char*)(x) + (kk) + 4 * (kk) / (C)))
#define MOE_IP_LO(x, kk, C) ((const __global uint*)((const __global char*)(x) + (kk) + 8 * (kk) / (C)))

inline float moe_ip_factor(int e13, int finite) { return finite ? ldexp(1.0f, e13) : NAN; }

// Chunk g of 8 values v (BF16 numbers as fp32) of a row of kk elements in chunks of 8.
inline void moe_ip_store8(float8 v, __global uint* row, int kk, int g) {
  int8 q;
  int e13, finite;
  const int sum = int_grid_chunk8(convert_ushort8(as_uint8(v) >> 16), &q, &e13, &finite);
  const int8 qo = (int8)(q.s0246, q.s1357);
  vstore8(convert_char8(qo >> 7), g, (__global char*)row);
  vstore8(convert_char8(qo & 0x7F), g, (__global char*)row + kk + kk);
  ((__global int*)((__global char*)row + kk))[g] = -12 * sum;
  ((__global float*)((__global char*)row + kk + kk / 2))[g] = moe_ip_factor(e13, finite);
}

// Chunk g of 16 values v (BF16 numbers as fp32) of a row of kk elements in chunks of 16.
inline void moe_ip_store16(float16 v, __global uint* row, int kk, int g) {
  int16 q;
  int e13, finite;
  const int sum = int_grid_chunk16(convert_ushort16(as_uint16(v) >> 16), &q, &e13, &finite);
  const int16 qo = (int16)(q.s0246, q.s1357, q.s8ace, q.s9bdf);
  vstore16(convert_char16(qo >> 7), g, (__global char*)row);
  vstore16(convert_char16(qo & 0x7F), g, (__global char*)row + kk + kk / 2);
  ((__global int*)((__global char*)row + kk))[g] = -12 * sum;
  ((__global float*)((__global char*)row + kk + kk / 4))[g] = moe_ip_factor(e13, finite);
}

#endif  // FP4CL_MOE_INT_PLANES_CL
