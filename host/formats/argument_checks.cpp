#include "formats/argument_checks.hpp"

#include <cmath>

#include "support/check.hpp"

namespace fp4cl {

void check_fp4_shape(const char* call, WeightFormat format, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) fail("{}: negative shape rows = {}, cols = {}", call, rows, cols);
  if (cols % block_size(format) != 0)
    fail("{}: cols (K) = {} is not a multiple of the {} block size {}", call, cols, to_string(format),
         block_size(format));
}

void check_global_scale(const char* call, const char* name, WeightFormat format, float gs) {
  if (format == WeightFormat::mxfp4) {
    if (gs != 1.0f) fail("{}: MXFP4 has no global scale, but {} = {} (must be 1)", call, name, gs);
  } else if (!std::isfinite(gs) || !(gs > 0.0f)) {
    fail("{}: {} = {} is not a finite positive NVFP4 global scale", call, name, gs);
  }
}

}  // namespace fp4cl
