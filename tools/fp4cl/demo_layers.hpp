// The layer sections of `fp4cl demo`: a checkpoint's first MoE layer (routed on the device from
// router logits) and one attention projection, each run on the device, checked against the scalar
// reference and timed from OpenCL event profiling (median of several calls after a warm-up).
#pragma once

#include <cstdint>

#include "fp4cl/checkpoint.hpp"
#include "fp4cl/context.hpp"

namespace fp4cl::cli {

struct LayerDemoOptions {
  std::int64_t tokens = 16;
  int runs = 10;
  unsigned seed = 1;
};

// Each prints its section and returns false when an output is outside the reference's bound.
// demo_moe runs the checkpoint's first MoE layer with MoeConfig::from_checkpoint's routing;
// demo_linear the first quantized q_proj (else the first quantized linear module).
bool demo_moe(const Context& ctx, const Checkpoint& checkpoint, const LayerDemoOptions& options);
bool demo_linear(const Context& ctx, const Checkpoint& checkpoint, const LayerDemoOptions& options);

}  // namespace fp4cl::cli
