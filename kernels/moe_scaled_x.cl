// The scaled form of a MoE activation row (MOE_SCALED_X; moe_fp4_vec.cl's MOE_SCALEDX reads it,
// moe_gather and moe_fc1 write it into x1q / x2q): a row of kk elements is kk floats, each
// 8-element chunk scaled by 2^(126 - E), E the exponent of the chunk's largest magnitude (the fp32
// exponent field - 127, clamped to -126..127: a subnormal chunk counts as -126, one holding NaN or
// infinity as 127), then kk/8 floats 2^E. The scaling is exact (ldexp by a power of two) but for
// elements more than 2^252 below their chunk's largest.
#ifndef FP4CL_MOE_SCALED_X_CL
#define FP4CL_MOE_SCALED_X_CL

// Floats per row of kk elements.
#define MOE_SX_ROW(kk) ((kk) + (kk) / 8)

// Chunk g (8 values v) of a row of kk elements: v × 2^(126 - E) at 8g, 2^E at kk + g.
inline void moe_sx_store8(float8 v, __global float* row, int kk, int g) {
  const uint8 e = (as_uint8(v) >> 23) & 0xFFu;
  const uint4 e4 = max(e.lo, e.hi);
  const uint2 e2 = max(e4.lo, e4.hi);
  const int exponent = clamp((int)max(e2.x, e2.y) - 127, -126, 127);
  vstore8(ldexp(v, 126 - exponent), g, row);
  row[kk + g] = ldexp(1.0f, exponent);
}

#endif  // FP4CL_MOE_SCALED_X_CL
