#include "kernels/linear_build_options.hpp"

namespace fp4cl {

BuildOptions linear_format_options(WeightFormat format) {
  BuildOptions options;
  options.define("FP4CL_FORMAT_MXFP4", format == WeightFormat::mxfp4 ? 1 : 0);
  return options;
}

}  // namespace fp4cl
