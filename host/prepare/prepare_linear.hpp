// A quantized linear module's tensors turned into the host weight layers consume (Fp4Weight):
// codes and block scales copied as stored (after checking the scales), global scales in both
// directions. Done once, at load.
#pragma once

#include <cstdint>

#include "checkpoint/quantized_module.hpp"
#include "fp4cl/weights.hpp"
#include "prepare/global_scales.hpp"

namespace fp4cl::detail {

// Copies `module`'s packed codes to `packed` (n·k/2 bytes) and its block scales to `scales`
// (n·k/block bytes), checking the scales first (check_block_scales).
void copy_codes_and_scales(const QuantizedModule& module, std::uint8_t* packed, std::uint8_t* scales);

// The weight's global scale (NVFP4), or 1 in both directions (MXFP4).
GlobalScale weight_global_scale(const QuantizedModule& module);
// The activations' global scale (NVFP4 W4A4), or 1 in both directions (W4A16, MXFP4: nothing
// is read).
GlobalScale input_global_scale(const QuantizedModule& module);

Fp4Weight prepare_linear(const QuantizedModule& module);

}  // namespace fp4cl::detail
