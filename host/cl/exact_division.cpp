#include "cl/exact_division.hpp"

#include "support/check.hpp"

namespace fp4cl {

bool has_exact_division(const DeviceInfo& info) { return info.correctly_rounded_divide || info.has_fp64; }

BuildOptions& add_exact_division(BuildOptions& options, const DeviceInfo& info, std::string_view kernel_file) {
  if (info.correctly_rounded_divide) return options.flag("-cl-fp32-correctly-rounded-divide-sqrt");
  if (info.has_fp64) return options.define("FP4CL_DIV_VIA_FP64");
  fail("{} needs correctly rounded fp32 division for bit-exact NVFP4 quantization, but the device {} offers "
       "neither CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT nor fp64 (cl_khr_fp64)",
       kernel_file, info.describe());
}

}  // namespace fp4cl
