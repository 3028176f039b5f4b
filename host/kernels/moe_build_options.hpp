// The numeric build options of the MoE kernels on a device, decided in one place:
//   - exact fp32 division (FP4.md §3, the NVFP4 activation recipe's `fp4cl_div`):
//     -cl-fp32-correctly-rounded-divide-sqrt where the device offers it, else
//     -D FP4CL_DIV_VIA_FP64 where it has fp64, else an error when the scheme needs it;
//   - the E2M1 decode: the subnormal bit trick where fp32 denormals are supported and fast, else
//     -D MOE_E2M1_NO_DENORM (exact values through a select): on devices that flush denormals, and
//     on CPU devices whose processor multiplies denormals slowly (kernels/cpu_denormal_speed.hpp:
//     Intel's assists). Both give the same values and bits. FP4CL_MOE_E2M1_DECODE=exact picks the
//     latter on any device, =subnormal the former wherever denormals are kept.
#pragma once

#include "fp4cl/context.hpp"
#include "fp4cl/program_cache.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

struct MoeNumerics {
  BuildOptions options;
  // The power of two the kernels' E2M1 decode carries: e2m1 × 2^e2m1_exp (-126 or 0).
  int e2m1_exp = -126;
};

// Whether the MoE layer's kernels use AVX-512 BF16 dot products for tiles of up to 4 pairs (the layer
// defines FP4_DPBF16, host/layers/moe.cpp; kernels/moe_fp4_vec.cl, MOE_BF16DOT): on CPU
// devices whose processor (this process's) has AVX-512 BW, VBMI and BF16, unless
// FP4CL_MOE_BF16_DOT=0; FP4CL_MOE_BF16_DOT=1 requires it (an error naming the device otherwise).
bool moe_bf16_dot_enabled(const Context& ctx);

// Whether the MoE layer's kernels use integer dot products for tiles of up to 4 pairs
// (kernels/moe_int_dot.cl, MOE_INTDOT; its activations' producers write their integer form):
// CPU devices, NVFP4 and MXFP4 (whose blocks of 32 are two steps of 16 under one scale), the
// 8-lane layout (MOE_VEC = MOE_GROUP = 8: AVX2), no BF16 dot products, unless FP4CL_MOE_INT_DOT=0.
// W4A4: exact (MOE_INT_CODES); W4A16: the activations on an integer grid per chunk of 16 (FC1) or
// 8 (FC2) elements (MOE_INT_PLANES; README, Numerics), where the device keeps fp32 denormals,
// unless FP4CL_W4A16_INT=0.
// FP4CL_MOE_INT_DOT=portable keeps the integer path but without the x86 builtins (the same bits;
// for tests and comparison). Any other value is an error naming the variable.
bool moe_int_dot_enabled(const Context& ctx, const QuantScheme& scheme, int vec, int group);
// Adds MOE_INT_CODES or MOE_INT_PLANES (and MOE_INT_NO_X86 for FP4CL_MOE_INT_DOT=portable) where
// enabled.
void add_moe_int_dot(BuildOptions& options, const Context& ctx, const QuantScheme& scheme, int vec, int group);

// Whether the MoE layer's kernels read scaled activations for tiles of up to 4 pairs under NVFP4
// W4A16 (kernels/moe_fp4_vec.cl, MOE_SCALEDX; the layer defines MOE_SCALED_X and its
// activations' producers write each row with every 8-element chunk scaled by a power of two,
// kernels/moe_scaled_x.cl): CPU devices, the 8-lane layout, the subnormal E2M1 decode (e2m1_exp
// -126), no BF16 dot products, no integer planes (FP4CL_W4A16_INT=0 or FP4CL_MOE_INT_DOT=0), unless
// FP4CL_MOE_SCALED_X=0 (any value but 0 or 1 is an error).
bool moe_scaled_x_enabled(const Context& ctx, const QuantScheme& scheme, int vec, int group, int e2m1_exp);
// Bytes per two elements of the x1q / x2q rows of the integer or scaled forms above: 4 (W4A4
// codes), 6 (W4A16 integer planes, FC2's chunks of 8; FC1's take 5), 9 (scaled activations), or 0
// where neither applies.
int moe_x_form_bytes(const Context& ctx, const QuantScheme& scheme, int vec, int group, int e2m1_exp);
// Adds MOE_SCALED_X where enabled.
void add_moe_scaled_x(BuildOptions& options, const Context& ctx, const QuantScheme& scheme, int vec, int group,
                      int e2m1_exp);

// `exact_division_needed`: the scheme quantizes activations with the NVFP4 recipe (W4A4).
// `subnormal_decode_needed`: a strategy of the layer decodes only to subnormals (mma), so that the
// speed of denormals does not decide (FP4CL_MOE_E2M1_DECODE=exact and devices that flush them still do).
MoeNumerics moe_numerics(const Context& ctx, bool exact_division_needed, bool subnormal_decode_needed = false);

}  // namespace fp4cl
