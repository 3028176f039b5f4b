#include "kernels/linear_build_options.hpp"

#include "support/check.hpp"

namespace fp4cl {

BuildOptions linear_format_options(WeightFormat format) {
  BuildOptions options;
  options.define("FP4CL_FORMAT_MXFP4", format == WeightFormat::mxfp4 ? 1 : 0);
  return options;
}

bool has_exact_division(const DeviceInfo& info) { return info.correctly_rounded_divide || info.has_fp64; }

BuildOptions& add_exact_division(BuildOptions& options, const Context& ctx) {
  const DeviceInfo& info = ctx.info();
  if (info.correctly_rounded_divide) return options.flag("-cl-fp32-correctly-rounded-divide-sqrt");
  if (info.has_fp64) return options.define("FP4CL_DIV_VIA_FP64");
  fail("device {} offers neither correctly rounded fp32 division nor fp64; the NVFP4 activation "
       "quantization recipe (FP4.md §3) needs exact division",
       info.describe());
}

}  // namespace fp4cl
