// MoeLogitRouting::from_checkpoint for callers that have the layer and its config.json already
// (MoeConfig::from_checkpoint, the C API's MoE layers): config.json is not read again.
#pragma once

#include "fp4cl/checkpoint.hpp"
#include "fp4cl/model_config.hpp"
#include "fp4cl/moe_logit_routing.hpp"

namespace fp4cl::detail {

// `model`'s routing of MoE layer `moe` of `checkpoint`, with the gate's correction bias where the
// routing takes one (MoeLogitRouting::from_checkpoint says what is checked).
MoeLogitRouting logit_routing_of(const Checkpoint& checkpoint, const CheckpointLayer& moe, const ModelConfig& model);

}  // namespace fp4cl::detail
