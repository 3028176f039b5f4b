// gpt-oss's MXFP4 experts: one MoE layer's experts stored as stacked tensors, not as one module
// per expert projection. As transformers defines them (integrations/mxfp4.py, GptOssExperts), for
// the experts container `<c>` ("model.layers.0.mlp.experts"):
//   <c>.gate_up_proj_blocks  U8 [E, 2I, H/32, 16]  E2M1 codes, two a byte, the low nibble first
//   <c>.gate_up_proj_scales  U8 [E, 2I, H/32]      E8M0 block scales (2^(byte - 127))
//   <c>.gate_up_proj_bias    BF16 or F32 [E, 2I]   (optional)
//   <c>.down_proj_blocks     U8 [E, H, I/32, 16]
//   <c>.down_proj_scales     U8 [E, H, I/32]
//   <c>.down_proj_bias       BF16 or F32 [E, H]    (optional; with the other bias or not at all)
// The rows of gate_up (and its bias) interleave the projections: row 2j is gate row j, row 2j + 1
// up row j (GptOssExperts: gate, up = gate_up[..., ::2], gate_up[..., 1::2]). Per expert and row
// the codes and scales are the MXFP4 row layout (FP4.md §2, §4), so loading is a copy that puts
// each expert's gate rows before its up rows (Fp4Experts' w13 order).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl::detail {

struct FusedExperts {
  std::string layer;  // the experts container, "model.layers.0.mlp.experts"
  QuantScheme scheme;
  std::int64_t experts = 0, hidden = 0, intermediate = 0;
  TensorView gate_up_blocks, gate_up_scales, down_blocks, down_scales;
  std::optional<TensorView> gate_up_bias, down_bias;

  // The bytes a load reads.
  std::uint64_t stored_bytes() const;
};

// The experts containers of `model` with fused tensors: every `<c>` of a `<c>.gate_up_proj_blocks`,
// in no particular order.
std::vector<std::string> fused_expert_layers(const SafetensorsModel& model);

// Binds `layer`'s fused tensors, checking presence, dtypes and shapes against each other. Throws
// fp4cl::Error naming the tensor, its file and what was expected.
FusedExperts bind_fused_experts(const SafetensorsModel& model, const std::string& layer, const QuantScheme& scheme);

// The layer's experts in Fp4Experts' layout (gate rows before up rows, biases alike). Checks every
// block scale (E8M0 0xFF is NaN) and bias (finite); throws fp4cl::Error naming the tensor.
Fp4Experts load_fused_experts(const FusedExperts& fused);

}  // namespace fp4cl::detail
