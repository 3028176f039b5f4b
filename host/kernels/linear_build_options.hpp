// Build options shared by the FP4 linear kernels: the weight format and, for kernels that run the
// NVFP4 activation recipe, how to get IEEE fp32 division on the device.
#pragma once

#include "fp4cl/context.hpp"
#include "fp4cl/program_cache.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

// FP4CL_FORMAT_MXFP4 = 0 (NVFP4) or 1 (MXFP4).
BuildOptions linear_format_options(WeightFormat format);

// The options that make quant_recipe.cl's fp4cl_div exact on `ctx`'s device:
// -cl-fp32-correctly-rounded-divide-sqrt where the device offers correctly rounded fp32 division,
// else -D FP4CL_DIV_VIA_FP64 where it has fp64 (a float quotient computed in double and rounded
// once is the correctly rounded float quotient). Throws fp4cl::Error naming the device otherwise:
// the NVFP4 activation recipe is specified bit for bit and an approximate division breaks it.
BuildOptions& add_exact_division(BuildOptions& options, const Context& ctx);

// Whether add_exact_division can succeed on the device, and why not.
bool has_exact_division(const DeviceInfo& info);

}  // namespace fp4cl
