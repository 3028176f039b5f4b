// Whether a layer's kernels use AVX-512 BF16 dot products (kernels/common/bf16_dot.cl: the layer
// defines FP4_DPBF16): on CPU devices whose processor (this process's: a CPU OpenCL device runs on
// it) has AVX-512 BW, VBMI and BF16, unless the environment variable `env` is 0; `env` = 1
// requires them (an error naming the device otherwise); any other value is an error.
// MoE: FP4CL_MOE_BF16_DOT (moe_build_options.hpp); linear: FP4CL_LINEAR_BF16_DOT (gemv_words).
#pragma once

#include "fp4cl/context.hpp"

namespace fp4cl {

bool cpu_bf16_dot_enabled(const Context& ctx, const char* env);

// Whether `env` is set to 1 (BF16 dot products required; cpu_bf16_dot_enabled then says yes).
bool cpu_bf16_dot_required(const char* env);

}  // namespace fp4cl
