// The built-in tuning of the linear kernels per device class, used where the tuning database has
// no entry for a layer (and as the base that a database entry's parameters refine). The MoE
// layer keeps its class defaults beside its strategies (kernels/moe_registry.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "fp4cl/device.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::tuning {

// Every tuning parameter of linear kernel strategy `kernel` ("gemv_rows", "gemm_tiled", ...) with
// its default for devices of `kind`. Throws fp4cl::Error for an unknown strategy.
Params linear_default_params(DeviceKind kind, const std::string& kernel);

// CPUs with 16 floats a vector (AVX-512; `float_width`: DeviceInfo::preferred_float_width): where
// the linear crossover below was measured since gemm_tiled's register tile.
bool linear_wide_cpu(DeviceKind kind, unsigned float_width);

// The default crossover of a linear layer: calls of at most this many tokens use the decode
// kernel, larger ones the prefill kernel. 32, or 64 on wide CPUs (linear_wide_cpu).
std::int64_t linear_default_decode_max_tokens(DeviceKind kind, unsigned float_width = 1);

// "CPU" or "GPU" (accelerators and others take the GPU defaults): the class whose defaults apply.
const char* default_class_name(DeviceKind kind);

}  // namespace fp4cl::tuning
