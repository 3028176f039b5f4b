// Checks shared by everything that takes an FP4 matrix shape or a global scale from a caller
// (the host reference and the device launchers), so that they fail alike, naming the call and
// the argument.
#pragma once

#include <cstdint>

#include "fp4cl/scheme.hpp"

namespace fp4cl {

// rows, cols >= 0 and cols a multiple of the format's block size.
void check_fp4_shape(const char* call, WeightFormat format, std::int64_t rows, std::int64_t cols);

// NVFP4: a finite global scale > 0. MXFP4 has none: the value must be 1.
void check_global_scale(const char* call, const char* name, WeightFormat format, float gs);

}  // namespace fp4cl
