// The MoE layer's weights on the device, prepared once at creation: FP4 codes and block scales
// repacked into the kernels' row-interleaved layout (kernels/moe_fp4_vec.cl) — gate, up and
// down as three matrices — and per expert the fp32 factors that turn a row's dot product into
// the real value: gate and up keep their own global scales, W4A4 folds in the activations'
// dequant-direction scale (alpha = input_scale × global_scale, an fp32 product).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/weights.hpp"
#include "prepare/fp4_split_layout.hpp"  // SplitLayout, split_layout (the split strategy's layout)

namespace fp4cl {

struct MoeDeviceWeights {
  // uint words [E, groups(rows), K/8, group] and block scales [E, groups(rows), K/block, group]:
  // fp16 (the exact value of each E4M3 scale) for NVFP4, the E8M0 bytes for MXFP4.
  // Uploaded only when the grouped or decode strategy is built (`interleaved`).
  cl::Buffer gate, gate_scales, up, up_scales, down, down_scales;
  // The split strategy's layout (kernels/moe_split.cl), only when it is built: gate and up
  // [E, I, H] and w2 [E, H, I] as uint4 words, their block scales as raw E4M3 / E8M0 bytes.
  cl::Buffer split_gate, split_gate_scales, split_up, split_up_scales, split_w2, split_w2_scales;
  // The mma strategy's layout (kernels/moe_mma.cl, prepare/fp4_mma_layout.hpp), only when it is
  // built: gate and up [E·I/16, H/64, 32] and w2 [E·H/16, I/64, 32] uint4, block scales as bytes.
  cl::Buffer mma_gate, mma_gate_scales, mma_up, mma_up_scales, mma_w2, mma_w2_scales;
  cl::Buffer fc1_factor;       // float [E, 2] {gate, up}
  cl::Buffer fc2_factor;       // float [E]
  cl::Buffer fc1_input_scale;  // float [E] W4A4 NVFP4: quant-direction FC1 input global scale (else 1)
  cl::Buffer fc2_input_scale;  // float [E] W4A4 NVFP4: 1.0, or the calibrated FC2 input scale
  cl::Buffer expert_map;       // int [E_global]
  cl::Buffer fc1_bias;         // float [E, 2, I] {gate rows, up rows} (Fp4Experts::w13_bias), or one 0
  cl::Buffer fc2_bias;         // float [E, H] (Fp4Experts::w2_bias), or one 0
  bool biases = false;         // the experts have biases (the kernels are built with MOE_BIAS)
  // Block scales are decoded as s × 2^scale_exp: with the E2M1 decode's 2^e2m1_exp every
  // weight × scale product is a normal fp32 number; the factors carry 2^-(scale_exp + e2m1_exp).
  int scale_exp = 0;
  std::uint64_t bytes_per_expert = 0;        // FP4 codes + block scales of FC1 and FC2, as stored here
  std::uint64_t split_bytes_per_expert = 0;  // the same in the split layout
  std::uint64_t mma_bytes_per_expert = 0;    // the same in the MMA layout
};

// `experts` must have passed check_moe_experts; `expert_map` is the resolved map; `group` the
// layout's interleave (MOE_GROUP); `interleaved` / `split` / `mma`: which layouts to upload.
MoeDeviceWeights upload_moe_weights(const Context& ctx, const Fp4Experts& experts, const MoeConfig& config,
                                    const std::vector<std::int32_t>& expert_map, int e2m1_exp, int group,
                                    bool interleaved = true, bool split = false, bool mma = false);

}  // namespace fp4cl
