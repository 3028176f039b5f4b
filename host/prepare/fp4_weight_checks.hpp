// Validation of a linear layer's FP4 weight against its scheme, before anything is prepared.
#pragma once

#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

// Throws fp4cl::Error naming the field and what was expected: format against scheme, shapes
// (n, k ≥ 1, k a multiple of the block size, packed and scales sizes), NaN block-scale bytes
// (E4M3 0x7F/0xFF, E8M0 0xFF, with their row and block), and global scales (NVFP4: gs_d positive
// and finite; W4A4 also the input's gs_q; MXFP4: both 1, as the format has none). Under W4A16 the
// input global scale is ignored (FP4.md §5: W4A16 must not run W4A4 math).
void check_linear_weight(const Fp4Weight& weight, const QuantScheme& scheme);

}  // namespace fp4cl
