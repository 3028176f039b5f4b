// The routed experts of one MoE layer stacked into vLLM's layout (FP4.md §6, Fp4Experts):
// w13 [E, 2I, H/2] with each expert's gate rows before its up rows, w2 [E, H, I/2], block scales
// alike; per-expert global scales with gate and up kept apart ([E, 2]); activation scales per
// expert or shared (ExpertInputScales). Done once, at load.
#pragma once

#include <vector>

#include "checkpoint/quantized_module.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl::detail {

// One expert's three projections: gate [I, H], up [I, H], down [H, I].
struct ExpertModules {
  const QuantizedModule* gate = nullptr;
  const QuantizedModule* up = nullptr;
  const QuantizedModule* down = nullptr;
};

// Stacks `experts` (expert e at index e), all of one scheme and shape. Checks every block scale
// and global scale as prepare_linear() does; throws fp4cl::Error naming the tensor otherwise.
Fp4Experts stack_experts(const std::vector<ExpertModules>& experts, ExpertInputScales input_scales);

}  // namespace fp4cl::detail
