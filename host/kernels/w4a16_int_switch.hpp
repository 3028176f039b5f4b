// FP4CL_W4A16_INT: whether W4A16 on CPUs may take the integer dot products, whose BF16 activations
// go on an integer grid per chunk (kernels/common/int_grid.cl; README, Numerics): the linear
// gemv_int and the MoE few-pair tiles (MOE_INT_PLANES). 1 or unset: yes (the default); 0: no, W4A16
// keeps exact BF16 products. Any other value is an error naming the variable.
#pragma once

namespace fp4cl {

bool w4a16_int_enabled();

}  // namespace fp4cl
