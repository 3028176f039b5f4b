// Stacks of experts made from other stacks, at load (Fp4Experts, FP4.md §6): one stack after
// another (an MoE layer's routed experts, then its shared expert), and an expert of intermediate
// size P·I cut into P experts of I (DeepSeek-V2's shared expert, n_shared_experts = 2).
#pragma once

#include <cstdint>

#include "fp4cl/weights.hpp"

namespace fp4cl::detail {

// Appends `more`'s experts after `into`'s. Both must have one weight format, H and I, and either
// both biases or neither (the same input-scale fields set); throws fp4cl::Error naming what differs.
void append_experts(Fp4Experts& into, const Fp4Experts& more);

// `wide` cut along its intermediate size into `parts` experts of I = wide.intermediate / parts:
// expert e's part j has its gate and up rows j·I .. j·I + I - 1 and its down columns j·I ..
// j·I + I - 1 (codes and block scales as stored: I must be a multiple of the block), its global
// and input scales, and part 0 alone its down bias (each part's output is summed once). Since
// SwiGLU acts on each intermediate value alone and a block lies within one part, the parts'
// outputs sum to the wide expert's output. Throws fp4cl::Error when I is not a whole number of
// blocks.
Fp4Experts split_intermediate(const Fp4Experts& wide, std::int64_t parts);

}  // namespace fp4cl::detail
