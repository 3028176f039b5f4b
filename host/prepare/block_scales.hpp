// Validation of stored block scales (FP4.md §1): every E4M3 or E8M0 byte must be a finite,
// non-negative scale. Zero (0x00, and E4M3's negative zero 0x80) is accepted: all-zero blocks
// occur in real checkpoints.
#pragma once

#include <cstdint>

#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl::detail {

// Throws fp4cl::Error naming the tensor, its file, the first offending block ([row, block]) and
// its byte, when `scales` ([rows, cols] bytes of `format`'s scale type) holds NaN (E4M3 0x7F /
// 0xFF, E8M0 0xFF) or a negative E4M3 scale.
void check_block_scales(const TensorView& scales, WeightFormat format);

}  // namespace fp4cl::detail
