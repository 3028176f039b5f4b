// The MoE layer's activation quantization (W4A4): one FP4 block with the shared recipe
// (common/quant_recipe.cl, FP4.md §3 NVFP4 and §4 MXFP4), written as e2m1 × block scale — exact
// in fp32; the global scale's inverse is part of the next GEMM's row factor. Used for the FC1
// input (moe_gather) and the FC2 input (moe_fc1).
//
// Build-time parameters: MOE_NVFP4 (else MXFP4). Kernels that include this file need exact
// fp32 division (host/kernels/moe_build_options.hpp).
#ifndef FP4CL_MOE_QUANT_CL
#define FP4CL_MOE_QUANT_CL

#include "common/quant_recipe.cl"

#ifdef MOE_NVFP4
#define MOE_QUANT_BLOCK 16
#else
#define MOE_QUANT_BLOCK 32
#endif

// v: the block's values (BF16 numbers); gs: the NVFP4 quant-direction global scale (ignored by
// MXFP4); out: global or (the _local variant) local memory.
#ifdef MOE_NVFP4
#define MOE_QUANT_SCALE(amax, gs, mult, s)        \
  const uint sb = nvfp4_scale_byte(amax, gs);     \
  const float mult = nvfp4_multiplier(sb, gs), s = e4m3_decode(sb)
#else
#define MOE_QUANT_SCALE(amax, gs, mult, s) \
  const uint sb = mxfp4_scale_byte(amax);  \
  const float mult = mxfp4_multiplier(sb), s = e8m0_decode(sb);  \
  (void)gs
#endif
#define MOE_QUANTIZE_BLOCK(name, space)                                                            \
  inline void name(const float* v, float gs, space float* out) {                                  \
    float amax = 0.0f;                                                                             \
    for (int i = 0; i < MOE_QUANT_BLOCK; ++i) amax = fp4cl_amax_step(amax, v[i]);                  \
    MOE_QUANT_SCALE(amax, gs, mult, s);                                                            \
    for (int i = 0; i < MOE_QUANT_BLOCK; ++i) out[i] = e2m1_decode(fp4_encode_scaled(v[i], mult)) * s; \
  }
MOE_QUANTIZE_BLOCK(moe_quantize_block, __global)
MOE_QUANTIZE_BLOCK(moe_quantize_block_local, __local)
MOE_QUANTIZE_BLOCK(moe_quantize_block_private, __private)

#endif  // FP4CL_MOE_QUANT_CL
