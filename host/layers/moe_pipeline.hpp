// The device side of one MoE forward chunk: the workspace (allocated once, for the layer's
// token capacity) and the kernels of one strategy with how they are enqueued:
//   route (topk ids or logits) -> sort -> gather -> fc1 -> grouped: fc2, reduce | decode: fc2_reduce
//   route -> split_fc1 -> split_fc2 (the split strategy: no sort, FC1 reads the caller's x)
//   route -> sort -> gather -> mma_fc1 -> mma_fc2 -> reduce (the mma strategy: tensor cores)
// OpenCL 1.2 has no grid-wide synchronization, so each global dependency (all pairs routed
// before sorting, sorted before gathering, every expert's FC2 done before the top-k sum) is a
// kernel boundary; everything else is fused.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/opencl.hpp"
#include "kernels/moe_registry.hpp"
#include "layers/moe_route_build.hpp"
#include "layers/moe_weights.hpp"

namespace fp4cl {

// Sizes fixed at creation.
struct MoeShape {
  std::int64_t hidden = 0, intermediate = 0, local_experts = 0, global_experts = 0;
  int top_k = 1;            // pairs a token: the routed slots, then the shared experts (MoeConfig::shared_experts)
  std::int64_t block = 16;  // FP4 block size: 16 (NVFP4) or 32 (MXFP4)
  int routed_k = 1;         // the caller's k: routed slots a token (topk_ids [T, k]); top_k - routed_k shared
  // The first shared expert's local id (the last top_k - routed_k of the local experts).
  std::int64_t shared_first() const { return local_experts - (top_k - routed_k); }
};

struct MoeWorkspace {
  std::int64_t max_tokens = 0, max_pairs = 0, max_tiles = 0;
  cl::Buffer pair_expert, pair_weight, pair_slot, slot_pair, tiles, chunk_info, status;
  cl::Buffer row_blocks_done;  // moe_mma_fc2's completion count per block of rows (zeroed by moe_sort)
  cl::Buffer x1, x2, y;  // y only when the grouped strategy is built
  // x1 and x2 as BF16 pairs (kernels/common/bf16_dot.cl, moe_bf16_quads16), for the BF16 dot products of
  // grouped and decode's moe_fc1/moe_fc2 (written by moe_gather and moe_fc1), or their integer form
  // for the integer dot products (MOE_INT_CODES); only where a layer can use them (NVFP4, BF16 or
  // integer dot products on the device), else null.
  cl::Buffer x1q, x2q;
};

// The number of tiles `pairs` pairs can need with tiles of `tile_m` over `experts` experts.
std::int64_t moe_max_tiles(std::int64_t pairs, std::int64_t experts, int tile_m);

// Allocates for `max_tokens` tokens, fewer when a buffer would exceed the device's largest
// allocation (the layer then runs more chunks). `x_form_bytes` (moe_x_form_bytes): bytes per two
// elements of the integer or scaled activation forms that the layer's kernels read from x1q and
// x2q (0: none); `bf16_pairs`: whether they read BF16 pairs there instead (4 bytes per two).
MoeWorkspace allocate_moe_workspace(const Context& ctx, const MoeShape& shape, const MoeSelection& selection,
                                    std::int64_t max_tokens, int x_form_bytes, bool bf16_pairs);

// The caller's routing inputs: topk ids + weights, or router logits.
struct MoeRoutingInput {
  const cl::Buffer* topk_ids = nullptr;
  const cl::Buffer* topk_weights = nullptr;
  const cl::Buffer* logits = nullptr;
  bool renormalize = true;
  // The layer's router's correction bias and scaling factor (MoeRouter::bias, ::scaling), for a
  // strategy that routes router logits itself (MoeStrategyKernels::routes_logits).
  const cl::Buffer* route_bias = nullptr;
  float route_scaling = 1.0f;
  // True when MoeRouter has written pair_expert and pair_weight before the strategy runs (router
  // logits, or shared experts' slots); false: the strategy routes top-k ids, or router logits
  // where it routes them itself, and the shared experts' slots then too.
  bool routed = false;
};

// The inputs of one chunk of tokens [token_offset, token_offset + tokens).
struct MoeChunk {
  std::int64_t token_offset = 0, tokens = 0;
  const cl::Buffer* x = nullptr;
  const cl::Buffer* out = nullptr;
  MoeRoutingInput routing;
  // Which launches get an event besides each chunk's last command (the call's `done`): every one
  // (MoeLaunchEvents::every on a profiling queue), or the call's first command (a profiling
  // queue: the call's start). An event costs ~7.5 µs of host time a launch on NVIDIA's OpenCL
  // where the queue profiles, ~1.8 where not (bench/standalone/enqueue_by_args.c).
  bool every_event = false, first_event = false;
};

// Enqueues `kernel` (after `last`: the queue is in order) and records it. It gets an event, which
// becomes the new `last`, where it ends the chunk (`chunk_end`), where the chunk gives every
// launch one, or where it is the call's first launch and the chunk asks for that one.
void moe_launch(const cl::CommandQueue& queue, cl::Kernel& kernel, const char* name, const cl::NDRange& global,
                const cl::NDRange& local, const MoeChunk& c, bool chunk_end, std::vector<MoeLaunch>& launches,
                cl::Event& last);

// Which kernel routes plain softmax top-k: by the device (automatic: a work-item a token on CPUs,
// else a work-group), or either one (tests/moe/test_moe_route_kernels.cpp runs both on PoCL).
enum class MoeSoftmaxRouter { automatic, work_item, work_group };

// Routing (the same for every strategy): pair_expert and pair_weight of the chunk's pairs, from
// top-k ids (moe_route_topk) or router logits: plain softmax top-k on CPUs by moe_route_logits (a
// work-item a token), elsewhere by moe_route_grouped (a work-group a token, ROUTE_LOGIT_KEYS),
// and every other MoeLogitRouting (checked by check_moe_logit_routing) by moe_route_grouped with
// the correction bias uploaded here.
class MoeRouter {
 public:
  MoeRouter(const Context& ctx, const MoeShape& shape, const MoeLogitRouting& logit_routing,
            MoeSoftmaxRouter softmax = MoeSoftmaxRouter::automatic);
  void enqueue(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
               const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches, cl::Event& last);
  const cl::Buffer& bias() const { return bias_; }
  float scaling() const { return scaling_; }

 private:
  cl::Kernel topk_;
  cl::Kernel logits_;   // plain softmax on a CPU, else null
  cl::Kernel grouped_;  // the other logit routings; null with logits_ or where MoeLogitRouting::unsupported
  cl::Buffer bias_;     // [E_global] fp32 (one zero where there is none)
  float scaling_ = 1.0f;
  std::size_t grouped_local_ = 0;  // work-items a token
};

// What the programs of a layer are built with besides the tiles.
struct MoeProgramOptions {
  BuildOptions numerics;  // moe_numerics(): exact division, E2M1 decode
  QuantScheme scheme;
  MoeOutput output = MoeOutput::bf16;
  bool batch_invariant = false;  // MoeConfig::batch_invariant (MOE_BATCH_INVARIANT where a file reads it)
  // The layer's routing of router logits where fp4cl computes it with moe_route_token.cl (the
  // router kernel's parameters: MoeRouter routes with a work-group a token), for the FC1 that
  // routes them itself; empty: the router kernel routes every call with logits.
  std::optional<MoeRouteBuild> route;
};

class MoeStrategyKernels {
 public:
  MoeStrategyKernels(const Context& ctx, const MoeSelection::Entry& entry, const MoeLayout& layout,
                     const MoeProgramOptions& options, const MoeProblem& problem);
  MoeStrategy id() const { return id_; }
  // True when this strategy routes top-k ids itself (no routing kernel before it): split in its
  // FC1, the others in moe_sort (one launch fewer a call: on PoCL each costs a few µs of a ~1 ms
  // one-token call).
  bool routes_topk() const { return true; }
  // True when a chunk of `tokens` with router logits is routed by this strategy's FC1 itself
  // (mma, one token or routed chunks; MoeTiles::route_logits): no router launch.
  bool routes_logits(std::int64_t tokens, int top_k) const;
  // Pairs of one expert that share a pass over its weights, at most, in a chunk of `tokens`.
  // Split shares passes only where the chunk has at least as many pairs as experts: with fewer,
  // most experts get one pair and the shared kernels' larger local memory only lowers occupancy.
  int pairs_per_pass(std::int64_t tokens, int top_k) const;
  // Everything after routing: sort, gather, FC1, FC2 and the top-k sum into chunk.out.
  void enqueue(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
               const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches, cl::Event& last);

 private:
  void enqueue_split(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
                     const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches, cl::Event& last);
  void enqueue_mma(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
                   const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches, cl::Event& last);
  // moe_sort (zeroing moe_mma_fc2's row-block counts when it sums the top-k) and moe_gather.
  void enqueue_sort(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
                    const MoeWorkspace& ws, const MoeChunk& chunk, int tile_m, bool zero_row_blocks,
                    std::vector<MoeLaunch>& launches, cl::Event& last);
  void enqueue_gather(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
                      const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches,
                      cl::Event& last);
  // moe_gather_pairs (routed chunks under W4A4: by pair, no moe_sort).
  void enqueue_gather_pairs(const cl::CommandQueue& queue, const MoeShape& shape, const MoeDeviceWeights& weights,
                            const MoeWorkspace& ws, const MoeChunk& chunk, std::vector<MoeLaunch>& launches,
                            cl::Event& last);
  MoeStrategy id_;
  MoeTiles tiles_;
  MoeLayout layout_;
  cl::Kernel sort_, gather_, fc1_, fc2_, reduce_;  // decode: fc2_ is moe_fc2_reduce, no reduce_; split: fc1_, fc2_
  cl::Kernel fc1_shared_;  // split: FC1 serving several pairs of an expert a pass (chunks of 2+ tokens)
  SplitGeometry split_;
  // mma: fc1_ and fc2_ are moe_mma_fc1 / moe_mma_fc2 with the tiles_ (mma_), fc1_few_ / fc2_few_
  // the same with mma_few_pairs_tiles (few_) for chunks of few pairs per expert; reduce_ moe_reduce.
  MmaGeometry mma_, few_;
  MoeTiles few_tiles_;
  cl::Kernel fc1_few_, fc2_few_;
  cl::Kernel fc1_pair_, fc2_pair_;  // one-token chunks: MMA_PER_PAIR builds with pair_ (its own K split; W4A4 FC1 wider)
  // Chunks of at most kMmaRoutedPairs pairs (few tokens): FC1 and FC2 find their tiles themselves
  // (MMA_ROUTED: a tile led by each pair, no moe_sort; W4A4 after moe_gather_pairs unless
  // routed_local_tile_).
  cl::Kernel fc1_routed_, fc2_routed_, gather_pairs_;
  MmaGeometry routed_;  // their geometry: few_'s, with FC1's row tiles for routed_local_tile_
  // Under W4A4 with routed_local_tile_: FC1 with several row tiles a warp (MoeTiles::routed_warp_tiles
  // 2 or 4), null where not built; its geometry routed_'s but FC1's warp tiles.
  cl::Kernel fc1_routed_wide_;
  MmaGeometry routed_wide_;
  // Routed chunks' FC2 as one work-group per (token, block of rows) over the token's top-k pairs,
  // summing them itself (MMA_TOKEN_SUM; MoeTiles::routed_fc2, mma_routed_token_fc2), null where not
  // built; its geometry routed_'s, FC2 without a K split (few_'s under batch invariance).
  cl::Kernel fc2_routed_token_;
  MmaGeometry routed_token_;
  // fc1_pair_, fc1_routed_ and fc1_routed_wide_ routing router logits themselves (MMA_ROUTE_LOGITS),
  // null where MoeTiles::route_logits does not ask for them, the layer's routing is not
  // moe_route_token.cl's, their local memory does not fit, or their build failed (a warning).
  cl::Kernel fc1_pair_logits_, fc1_routed_logits_, fc1_routed_wide_logits_;
  std::int64_t route_experts_ = 0;  // E_global of those programs' routing
  MmaGeometry pair_;
  int pair_row_loop_ = 1;  // MMA_ROW_LOOP of the one-token W4A4 FC1
  int routed_row_loop_ = 1;  // MMA_ROW_LOOP of the routed FC1 (not routed_wide_'s)
  bool mma_few_pairs(std::int64_t pairs) const;
  // mma: whether a chunk of `tokens` runs fc1_pair_ / fc2_pair_ (one token), or the routed kernels.
  bool mma_per_pair(std::int64_t tokens) const;
  bool mma_routed(std::int64_t tokens, int top_k) const;
  // mma: whether routed chunks of `pairs` pairs take fc2_routed_token_ (where built): the tiles'
  // routed_fc2, or mma_routed_token_fc2 where it is automatic (0).
  bool mma_token_fc2(std::int64_t pairs, std::int64_t intermediate) const;
  int shared_pairs_ = 1;   // split: pairs a pass of fc1_shared_ (1: none built)
  std::int64_t experts_ = 1;  // local experts
  std::size_t sort_local_limit_ = 1;
  bool mma_direct_ = false;  // mma: FC1 reads the BF16 input in place (W4A16), no moe_gather
  bool mma_per_pair_ = false;  // mma: one-token chunks run fc1_pair_ / fc2_pair_ (no moe_sort)
  // mma under W4A4: > 0 where routed chunks' FC1 quantizes their tokens into local memory (no
  // moe_gather_pairs) in tiles of at most this many pairs (mma_routed_local_tile); 0: the gather,
  // and tiles of few_tiles_.tile_m.
  int routed_local_tile_ = 0;
};

}  // namespace fp4cl
