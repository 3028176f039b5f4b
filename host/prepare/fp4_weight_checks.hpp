// Validation of a linear layer's FP4 weight against its scheme, before anything is prepared.
#pragma once

#include <string>

#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

// Throws fp4cl::Error naming the field and what was expected: format against scheme, shapes
// (n, k ≥ 1, k a multiple of the block size, packed and scales sizes), NaN block-scale bytes
// (E4M3 0x7F/0xFF, E8M0 0xFF, with their row and block), and global scales (NVFP4: gs_d positive
// and finite; W4A4 also the input's gs_q and gs_d, reciprocals of each other; MXFP4: all 1, as
// the format has none). Under W4A16 the input scales are ignored (FP4.md §5: W4A16 must not run
// W4A4 math).
void check_linear_weight(const Fp4Weight& weight, const QuantScheme& scheme);

// Throws unless input_scale (gs_d) × input_global_scale (gs_q) is 1 up to the rounding of one of
// them: the two directions of one activation scale. `what` names them in the message
// ("Fp4Weight", "MoE experts: w13_input_scale[3]").
void check_activation_scale_pair(float input_scale, float input_global_scale, const std::string& what);

}  // namespace fp4cl
