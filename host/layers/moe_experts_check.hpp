// Validation of stacked FP4 experts against an MoE scheme: shapes, tensor sizes, global scales
// and block-scale bytes. Pure host code, shared by the layer and the scalar reference.
#pragma once

#include <cstdint>

#include "fp4cl/moe_activation.hpp"
#include "fp4cl/moe_logit_routing.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

// Throws fp4cl::Error naming the tensor (and element) that does not fit:
//   - the weight format must be the scheme's; E >= 1; H and I multiples of the block size;
//   - w13 [E, 2I, H/2] + scales [E, 2I, H/block], w2 [E, H, I/2] + scales [E, H, I/block];
//   - NVFP4: w13_global_scale [E, 2] and w2_global_scale [E], finite and > 0; MXFP4: empty or 1;
//   - NVFP4 W4A4: w13_input_global_scale and w13_input_scale [E] (and the w2_ ones when
//     `calibrated_fc2_input_scale`), finite, > 0 and each pair reciprocal up to rounding
//     (check_activation_scale_pair). W4A16 never reads them;
//   - no NaN block scale (E4M3 0x7F/0xFF, E8M0 0xFF);
//   - biases: both or neither, w13_bias [E, 2I] and w2_bias [E, H], finite.
void check_moe_experts(const Fp4Experts& experts, const QuantScheme& scheme, bool calibrated_fc2_input_scale);

// Throws fp4cl::Error unless the activation's parameters are usable (the clamped SwiGLU's alpha
// and limit finite and > 0).
void check_moe_activation(const MoeActivation& activation);

// The most expert groups a logit routing may have, and the most global experts a routing other
// than plain softmax may serve (the grouped router keeps a token's scores in local memory).
constexpr int kMaxRoutingGroups = 64;
constexpr std::int64_t kMaxGroupedRoutingExperts = 2048;

// Throws fp4cl::Error naming the MoeConfig::logit_routing field that does not fit E_global
// experts and top_k: groups dividing E_global (at most kMaxRoutingGroups), 1 <= top_groups <=
// groups, top_k <= top_groups × E_global / groups, two experts a group when a bias ranks groups
// by their two best keys, a correction bias of E_global finite values or none, a finite
// scaling factor > 0, and at most kMaxGroupedRoutingExperts experts unless plain softmax.
void check_moe_logit_routing(const MoeLogitRouting& routing, std::int64_t global_experts, int top_k);

}  // namespace fp4cl
