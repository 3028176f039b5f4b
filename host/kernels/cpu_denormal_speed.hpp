// Whether fp32 multiplies with a denormal operand are much slower than with normal ones on this
// process's processor (a CPU OpenCL device runs on it). Intel cores take a microcode assist for
// each of them (measured on a 2-core Xeon with AVX-512 under PoCL, 2026-11-27: MoE qwen3-30b-a3b
// prefill with the E2M1 decode to fp32 subnormals 756 ms, with the exact decode 157 ms); AMD Zen
// multiplies them at full speed (the subnormal decode is the faster one there: kernels/moe_fp4_vec.cl).
// Measured once per process: the same multiplies timed with denormal and with normal operands,
// the fastest of several runs of each, denormals kept (x86: DAZ and FTZ cleared for the probe).
#pragma once

#include "fp4cl/device.hpp"

namespace fp4cl {

struct DenormalSpeed {
  double normal_ns = 0, denormal_ns = 0;  // the fastest run of each
  // Slow: denormal operands take at least this many times as long (Intel: ~20-100×; AMD Zen: ~1×).
  static constexpr double kSlowRatio = 4.0;
  double ratio() const { return normal_ns > 0 ? denormal_ns / normal_ns : 1.0; }
  bool slow() const { return ratio() >= kSlowRatio; }
};

// This processor's, measured on the first call (about a millisecond), the same afterwards.
const DenormalSpeed& host_denormal_speed();

// CPU devices that keep fp32 denormals, on a processor where they are slow (host_denormal_speed).
bool cpu_fp32_denormals_slow(const DeviceInfo& device);

}  // namespace fp4cl
