// Bit-exact NVFP4 quantization needs IEEE (correctly rounded) fp32 division inside the kernels
// (nvfp4_multiplier in kernels/common/quant_recipe.cl, FP4.md §3). OpenCL C's default division
// may be off by up to 2.5 ulp, so every kernel that includes the recipe is built with the options
// this helper chooses — the one place that decides it.
#pragma once

#include <string_view>

#include "fp4cl/device.hpp"
#include "fp4cl/program_cache.hpp"

namespace fp4cl {

// Adds to `options`, for the device `info` describes:
//   -cl-fp32-correctly-rounded-divide-sqrt   when the device offers correctly rounded division;
//   -D FP4CL_DIV_VIA_FP64                    else when it has fp64 (a double quotient of two floats
//                                            rounded once to float is the correctly rounded one);
// and throws fp4cl::Error naming `kernel_file` and the device when it has neither.
BuildOptions& add_exact_division(BuildOptions& options, const DeviceInfo& info, std::string_view kernel_file);

// Whether add_exact_division succeeds on the device.
bool has_exact_division(const DeviceInfo& info);

}  // namespace fp4cl
