// Whether a layer's kernels use AVX-512 BF16 dot products (kernels/common/bf16_dot.cl: the layer
// defines FP4_DPBF16): on CPU devices whose processor (this process's: a CPU OpenCL device runs on
// it) has AVX-512 BW, VBMI and BF16 and whose OpenCL compiler builds them (kernels/
// bf16_dot_probe.cl, built once per device and process; a compiler that does not is logged at
// info level with its error, and the layers take their other decode), unless the environment
// variable `env` is 0; `env` = 1 requires them (an error naming the device, and the compiler's
// error, otherwise); any other value is an error.
// MoE: FP4CL_MOE_BF16_DOT (moe_build_options.hpp); linear: FP4CL_LINEAR_BF16_DOT (gemv_words).
#pragma once

#include <string>

#include "fp4cl/context.hpp"

namespace fp4cl {

bool cpu_bf16_dot_enabled(const Context& ctx, const char* env);

// Whether this process's processor has AVX-512 BW, VBMI and BF16.
bool cpu_has_avx512_bf16();

// Why the layers on ctx's device take no BF16 dot products whatever the environment says: "" when
// they may (a CPU device on such a processor whose compiler builds the probe), else the reason
// (not a CPU device, the processor, or the compiler's error). fp4cl-bench devices prints it.
std::string cpu_bf16_dot_unavailable(const Context& ctx);

// Whether `env` is set to 1 (BF16 dot products required; cpu_bf16_dot_enabled then says yes).
bool cpu_bf16_dot_required(const char* env);

namespace detail {
// Tests: forgets every device's probe result, so that the next question builds the probe again.
void forget_bf16_dot_probes();
}  // namespace detail

}  // namespace fp4cl
