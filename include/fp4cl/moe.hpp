// The fused FP4 Mixture-of-Experts layer (FP4.md §6): routing, dispatch of tokens to experts,
// FC1 with SwiGLU, FC2 and the top-k weighted sum, for NVFP4 and MXFP4 experts with BF16
// activations (W4A16) or activations quantized to FP4 inside the layer (W4A4).
//
//   out[t] = Σ_s topk_weights[t,s] × Expert_{topk_ids[t,s]}(x[t])           (s = 0 .. k-1, in order)
//            (+ the shared experts with weight 1 after them: MoeConfig::shared_experts)
//   Expert_e(x) = FC2_e(bf16(silu(x·gateᵀ) × x·upᵀ))                        silu(g) = g / (1 + e^-g)
//   (MoeConfig::activation may choose gpt-oss's clamped SwiGLU instead, and Fp4Experts may carry
//   biases: gate, up and FC2's outputs each + their expert's bias, after the dequant factors.)
//
// Rounding points (the scalar reference, host/reference/moe_reference.hpp, follows them):
//   - W4A16: x is used as given (BF16); the SwiGLU output is rounded to BF16 before FC2. On CPUs
//     with 8-lane SIMD (AVX2), NVFP4 tiles of up to 4 pairs multiply x and FC2's input on an
//     integer grid per chunk of 16 and 8 elements: elements within 2^7 of their chunk's largest
//     are exact, smaller ones rounded to a multiple of 2^-14 of its power of two (README
//     "Numerics"; the reference's bound covers it; FP4CL_W4A16_INT=0 keeps exact products).
//   - W4A4: x is quantized per block with the expert's FC1 input global scale (NVFP4) or the
//     MXFP4 "ceil" rule; the SwiGLU output is rounded to BF16, then quantized per block for FC2
//     with dynamic block scales and global scale 1.0 (or the checkpoint's calibrated FC2 input
//     scale, MoeConfig::fc2_input_scale), as FlashInfer's b12x does.
//     Each FC's dot products are scaled by alpha = input_scale × global_scale, one fp32 product of the
//     stored dequant-direction scales (vLLM's alpha; Fp4Experts::w13_input_scale, w2_input_scale).
//   - Dot products, SwiGLU and the top-k sum are fp32; the output is rounded once (BF16 or fp32).
//   The top-k sum runs in slot order with no atomics: the same inputs give bit-identical outputs.
//   Batch invariance: the strategy (and, where the tuning database has several buckets of it,
//   its tiles) is chosen once per call, by the call's token count, and runs every chunk of it. The `decode` strategy computes each pair alone, so a token's output bits
//   depend only on its own row and routing; so does `split` (GPUs: where several pairs share a
//   pass over an expert's weights, each pair's sums keep the order they have alone; tested by
//   tests/moe/test_moe_chunks.cpp). The `grouped` strategy sums a pair's dot products in
//   an order that depends on how many pairs share its tile (one pair gets more accumulator
//   chains, for speed), so a token's bits can depend on the other tokens of the call and on how
//   the call is cut into chunks (max_tokens) — within the reference bound, and bit-identical run
//   to run. So can `mma` (tensor cores): it splits K over more warps for chunks with few pairs
//   per expert than for chunks with many. MoeConfig::batch_invariant = true removes that
//   dependence (mma then splits K alike for every chunk). The strategies may
//   round differently from each other (within the bound).
//
// Routing: either router logits [T, E_global] fp32 (softmax over all experts, top-k chosen by
// logit value with ties to the lower expert index, optional renormalization, computed on the
// device; or, with MoeConfig::logit_routing, sigmoid scores, expert groups, a correction bias and
// a scaling factor: DeepSeek-V3's gate, fp4cl/moe_logit_routing.hpp), or precomputed topk_ids
// [T, k] int32 with topk_weights [T, k] fp32.
// A row may name the same expert twice: each slot contributes its own weighted term (the
// expert's output is then added twice, with each slot's weight), exactly as the formula reads.
//
// Expert parallelism: MoeConfig::expert_map maps every global expert id to this rank's local
// expert (an index into Fp4Experts) or -1; experts mapped to -1 contribute nothing here.
//
// Invalid ids: a topk_id < 0 or >= E_global never indexes memory. The device skips that slot
// and records the first invalid (token, slot); finish() (and forward_*()) throws fp4cl::Error
// naming it. The output of a call that reported an invalid id must not be used.
//
// Buffers are the caller's: x [T, H] BF16 (uint16 bits), router logits [T, E_global] fp32,
// topk_ids [T, k] int32, topk_weights [T, k] fp32, out [T, H] BF16 or fp32 — row-major from
// offset 0 and at least that large (checked against CL_MEM_SIZE). Commands go to the context's
// queue, which is in order (Context refuses others): a call's commands and consecutive calls run
// in enqueue order without wait lists; `wait` orders the first command after other queues' work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe_activation.hpp"
#include "fp4cl/moe_logit_routing.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

class Checkpoint;       // fp4cl/checkpoint.hpp
struct MoeLoadOptions;  // fp4cl/checkpoint.hpp

enum class MoeOutput { bf16, fp32 };

// NVFP4 W4A4 only: the global scale the FC2 input is quantized with.
enum class MoeFc2InputScale {
  dynamic,     // 1.0: dynamic per-block scales only (b12x)
  calibrated,  // Fp4Experts::w2_input_global_scale, per expert (quant direction)
};

struct MoeConfig {
  QuantScheme scheme;   // its weight format must be the experts' format
  int top_k = 1;        // k, 1 <= k <= E_global
  bool renormalize = true;  // router-logit path: divide the k weights by their sum
  // Router-logit path: how logits become ids and weights (default: softmax top-k). Checked at
  // creation against E_global and top_k.
  MoeLogitRouting logit_routing;
  // Workspace capacity in tokens, allocated once at creation. A larger batch is processed in
  // chunks of this many tokens (never refused), with the strategy chosen for the whole call.
  // The capacity is lowered where a workspace buffer would exceed the device's largest
  // allocation; max_tokens × top_k must stay below 2^31, and a workspace that would take more
  // than half the device's memory is refused (fp4cl::Error).
  std::int64_t max_tokens = 256;
  // true: a token's output bits do not depend on max_tokens (chunking), nor on the other tokens
  // of a call as long as it runs the same strategy (force one with `kernel` to make that always
  // so): every `grouped` tile sums in the order of a full tile, with fewer independent
  // accumulator chains where a tile holds one or two pairs, and a strategy runs one set of tiles
  // (the tuning database's largest bucket's) for every call (README "Expert parallelism" has the
  // measured cost: `fp4cl-bench moe --batch-invariant`).
  bool batch_invariant = false;
  // Empty: every expert is local (E_global = E). Otherwise [E_global]: local id or -1.
  std::vector<std::int32_t> expert_map;
  // Shared experts (DeepSeek-V3, Kimi-K2, GLM-4.5): the last S of the Fp4Experts' experts, which
  // every token goes through besides its k routed ones, each with weight 1 and summed after them
  // in the same fixed order: out[t] = Σ_s w[t,s]·Expert_{id[t,s]}(x[t]) + Σ_j Expert_{E-S+j}(x[t]).
  // Routed ids then cover the first E - S experts (E_global = E - S); the logit router's
  // weights (its scaling factor included) are the routed slots' only. With an expert_map every
  // rank would add the shared experts, so the two do not go together (an error). 0: none.
  int shared_experts = 0;
  MoeFc2InputScale fc2_input_scale = MoeFc2InputScale::dynamic;
  MoeOutput output = MoeOutput::bf16;
  MoeActivation activation;  // SwiGLU; gpt-oss's clamped form with MoeActivation::gpt_oss()
  // Kernel strategy: "" = automatic (or the environment variable FP4CL_MOE_KERNEL when set),
  // else one of moe_kernel_strategies(). An unknown name is an error listing the valid ones.
  std::string kernel;

  // The configuration MoE layer `layer` of a checkpoint runs with (its name or its decoder
  // layer's prefix, as Checkpoint::load_moe() takes it): the layer's scheme, top_k = config.json's
  // num_experts_per_tok, renormalize = ModelConfig::renormalize() (fp4cl/model_config.hpp),
  // activation = gpt-oss's clamped SwiGLU (limit: config.json's swiglu_limit) where
  // ModelConfig::clamped_swiglu(), every other field its default. Throws fp4cl::Error when
  // config.json does not say what top_k or renormalize is: set those by hand then.
  static MoeConfig from_checkpoint(const Checkpoint& checkpoint, std::string_view layer);
};

// The names of the kernel strategies: "grouped", "decode", "split" (GPUs: rows split over many
// work-items, few pairs), "mma" (NVIDIA tensor cores through inline PTX, compute capability 8.0
// or more; elsewhere an emulation, only when forced). Automatic selection (host/kernels/
// moe_registry.hpp) takes split for few pairs on GPUs, then decode up to its crossover, then
// mma where it runs natively, else grouped.
std::vector<std::string> moe_kernel_strategies();

// Which launches of a call get an event. Each chunk's last command always does (the last chunk's
// is `MoeCall::done`). Where the context's queue records profiling times
// (Context::profiling_enabled()), `ends` adds the call's first command, which is enough to time a
// call (the default), and `every` gives every launch one, for per-command timings (fp4cl-bench
// --launches). An event costs host time: on NVIDIA's OpenCL ~7.5 µs a launch on a queue with
// profiling, ~1.8 on one without, and since the GPU starts each command as it is enqueued, that
// time shows as a gap before the next command (qwen3-30b-a3b W4A4 T = 8 on an H100: with
// `every` 8.2 µs between moe_gather_pairs and FC1 and 1.5 between FC1 and FC2; with `ends` FC2
// starts 6.9 µs earlier, ~3 µs of gaps left).
enum class MoeLaunchEvents { ends, every };

// One kernel launch of a call, in enqueue order; `event` is null on the launches that get none
// (MoeLaunchEvents). Read profiling times from the events that are set. Its sizes say how many
// work-groups it ran: against what a compute unit holds (bench/gpu/registers.sh on NVIDIA), whether
// they ran in one pass.
struct MoeLaunch {
  std::string kernel;
  cl::Event event;
  std::uint64_t work_items = 0;       // its global size (the dimensions' product)
  std::uint64_t work_group_size = 0;  // its local size (the same); 0 where the driver chose it
  // work_items / work_group_size; 0 where the driver chose the work-group size.
  std::uint64_t work_groups() const { return work_group_size ? work_items / work_group_size : 0; }
};

// What one enqueue_*() put on the queue.
struct MoeCall {
  std::int64_t tokens = 0;
  std::vector<std::string> chunk_strategies;  // the strategy that ran each chunk
  std::vector<MoeLaunch> launches;
  cl::Event done;  // the last command (null when tokens == 0)
  cl::Buffer topk_ids;  // the caller's ids (to name an invalid one), null on the logit path
  // The launches' events that are set, in launch order: on a profiling queue the first and last
  // are the call's start and end.
  std::vector<cl::Event> events() const;
};

// Read back from the device by finish().
struct MoeStats {
  std::int64_t tokens = 0;
  std::int64_t local_pairs = 0;     // (token, slot) pairs whose expert is on this rank
  std::int64_t expert_passes = 0;   // times one expert's weights were streamed (one per tile)
  std::uint64_t weight_bytes = 0;   // FP4 codes + block scales streamed: expert_passes × per expert
};

// Thread safety: a MoeLayer holds one call's state (workspace, kernel arguments), so one thread
// uses it at a time; other threads use layers of their own (with_context()).
class MoeLayer {
 public:
  // Validates the experts and the configuration (clear errors naming the tensor or field),
  // uploads the weights, builds the kernels and allocates the workspace.
  static MoeLayer create(const Context& ctx, const Fp4Experts& experts, const MoeConfig& config);

  // MoE layer `layer` of a checkpoint (its name or its decoder layer's prefix): the stacked
  // experts as Checkpoint::load_moe() gives them (with `load`'s choice of activation scales),
  // then create(). config.scheme must be the layer's (MoeConfig::from_checkpoint() gives a config
  // that fits); without a config, MoeConfig::from_checkpoint(checkpoint, layer) is used.
  static MoeLayer from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer);
  static MoeLayer from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer,
                                  const MoeConfig& config);
  static MoeLayer from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer,
                                  const MoeConfig& config, const MoeLoadOptions& load);

  // A layer on `ctx` that shares this layer's prepared weights on the device (read-only after
  // creation) and has a workspace and kernel objects of its own, so that the two may run at the
  // same time from different threads. `ctx` must be on this layer's OpenCL context (typically
  // Context::with_new_queue() of it); throws fp4cl::Error otherwise. Same configuration, same
  // kernels: the same inputs give the same bits on either.
  MoeLayer with_context(const Context& ctx) const;

  // Enqueue a forward pass; nothing is read back. `wait` = events the inputs depend on. Every
  // buffer must be made in the layer's OpenCL context (Context::opencl_context()): a null one, one
  // of another context or one too small is an fp4cl::Error naming it.
  MoeCall enqueue_topk(const cl::Buffer& x, const cl::Buffer& topk_ids, const cl::Buffer& topk_weights,
                       const cl::Buffer& out, std::int64_t tokens, const std::vector<cl::Event>& wait = {});
  MoeCall enqueue_logits(const cl::Buffer& x, const cl::Buffer& router_logits, const cl::Buffer& out,
                         std::int64_t tokens, const std::vector<cl::Event>& wait = {});

  // Waits for `call` (the layer's latest enqueue: the workspace holds one call's status),
  // throws fp4cl::Error on an invalid expert id, and returns what the call streamed.
  MoeStats finish(const MoeCall& call);

  // enqueue + finish.
  MoeStats forward_topk(const cl::Buffer& x, const cl::Buffer& topk_ids, const cl::Buffer& topk_weights,
                        const cl::Buffer& out, std::int64_t tokens);
  MoeStats forward_logits(const cl::Buffer& x, const cl::Buffer& router_logits, const cl::Buffer& out,
                          std::int64_t tokens);

  std::int64_t num_local_experts() const;
  std::int64_t num_global_experts() const;
  std::int64_t hidden() const;
  std::int64_t intermediate() const;
  int top_k() const;           // k: routed slots a token
  int shared_experts() const;  // MoeConfig::shared_experts
  std::int64_t max_tokens() const;
  const QuantScheme& scheme() const;
  // FP4 codes + block scales of one expert (FC1 and FC2), as stored for the layer's first
  // strategy; _for: for the strategy that serves `tokens` tokens (the split strategy stores
  // NVFP4 scales as E4M3 bytes, the others as fp16).
  std::uint64_t expert_weight_bytes() const;
  std::uint64_t expert_weight_bytes_for(std::int64_t tokens) const;
  // The strategy a call of `tokens` tokens runs with (every chunk of it), and its tile: how many
  // pairs of one expert share each pass over the expert's weights.
  std::string strategy_for(std::int64_t tokens) const;
  int tile_pairs_for(std::int64_t tokens) const;
  // That strategy's tiles and where they come from: "mma: tile_m 32, local sizes 32 and 32,
  // split_k 1, few_split_k 0, unroll 8, stage 0, warp_tiles 1 [built-in]" (or "[tuned bucket 512
  // (FILE)]", "[tuned (FILE)]", "[FP4CL_MOE_TILES]", "[FP4CL_MOE_TILES over tuned bucket 8 (FILE)]").
  std::string kernel_description(std::int64_t tokens) const;
  // Which launches of later calls get events on a profiling queue (MoeLaunchEvents; `ends` by
  // default). Copies of a layer share the setting.
  void set_launch_events(MoeLaunchEvents which);
  MoeLaunchEvents launch_events() const;

 private:
  struct Impl;
  explicit MoeLayer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fp4cl
