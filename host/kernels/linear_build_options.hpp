// Build options shared by the FP4 linear kernels: the weight format. (Kernels that run the NVFP4
// activation recipe also take cl/exact_division.hpp's add_exact_division.)
#pragma once

#include "fp4cl/context.hpp"
#include "fp4cl/program_cache.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

// FP4CL_FORMAT_MXFP4 = 0 (NVFP4) or 1 (MXFP4).
BuildOptions linear_format_options(WeightFormat format);

}  // namespace fp4cl
