// Expert parallelism: one MoE layer whose experts are spread over several OpenCL devices of one
// process (docs/expert-parallel.md; a multi-process runtime uses the same pieces with its own
// collective, see there).
//
// Each shard is a MoeLayer on its own Context holding a slice of the experts; its
// MoeConfig::expert_map maps every global expert id to the shard's local id or -1. A forward pass
// gives every shard the whole batch (x and the routing); each shard computes, in fp32, the part of
// the output that its own experts contribute (tokens routed to none of them give 0). The host sums
// the shards' fp32 partial outputs element by element in shard order 0, 1, ..., N-1 and rounds the
// sum once to the output type:
//
//   out[t] = round( (...((P_0[t] + P_1[t]) + P_2[t]) ...) + P_{N-1}[t] ),
//   P_s[t] = Σ_{slots j of t, in slot order, expert on shard s} w[t,j] × Expert(x[t])   (fp32)
//
// Determinism: the same inputs on the same devices give bit-identical outputs, whatever the
// shards' timing (nothing is summed in arrival order and no atomics are used). With one shard the
// output is bit-identical to a MoeLayer's. With several it is not in general: a MoeLayer adds the
// k weighted expert outputs of a token in slot order in one fp32 sum, the shards group them by
// shard first, so the last bits of the fp32 sum (and, rarely, a BF16 rounding) can differ. Both
// are within the scalar reference's bound (host/reference/moe_reference.hpp: the top-k sum is
// bounded for any order of its k additions).
//
// The shards run MoeLayers with `config`: MoeConfig::batch_invariant makes a token's partial
// independent of the other tokens of the batch (docs/expert-parallel.md, "Bits across patterns").
//
// Routing from router logits is computed by every shard on its own device with the same kernel
// (softmax over all global experts, top-k); devices of one kind agree bit for bit. On devices of
// different kinds the fp32 softmax weights may differ in their last bit between shards, within the
// reference's routing bound.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

// The expert maps of a contiguous split of `global_experts` experts over `shards` shards: shard s
// owns a contiguous range of global ids, in order, the first (global_experts % shards) shards one
// expert more than the others; map[s][g] = g - first(s) inside the range, else -1. Throws
// fp4cl::Error when shards < 1 or there are fewer experts than shards.
std::vector<std::vector<std::int32_t>> contiguous_expert_maps(std::int64_t global_experts, int shards);

// The local experts of one shard: from `all` (the stacked experts of every global id), the
// experts g with expert_map[g] >= 0, stacked in local-id order (local expert l is the global g
// with expert_map[g] == l). expert_map must have one entry per expert of `all`, each -1 or a local
// id, every local id in [0, n) named exactly once (n = the number of entries that are not -1,
// at least 1). Per-expert tensors of `all` that are empty stay empty. Throws fp4cl::Error naming
// the offending entry or tensor.
Fp4Experts slice_experts(const Fp4Experts& all, const std::vector<std::int32_t>& expert_map);

// Checks that `expert_maps` (one per shard) together own each of `global_experts` experts exactly
// once: every map has global_experts entries, valid as in slice_experts, and every global id is
// local on exactly one shard. Throws fp4cl::Error naming the expert or the shard.
void check_expert_partition(const std::vector<std::vector<std::int32_t>>& expert_maps, std::int64_t global_experts);

// A MoE layer over several devices in one process. Not thread-safe: one thread calls it at a time.
// The shards run concurrently (each on its own queue).
class ExpertParallelMoe {
 public:
  // One shard per context (contexts may be different devices, sub-devices of one device, or
  // separate contexts on one device). `experts` holds every global expert; `config` is the whole
  // layer's (config.expert_map must be empty: the partition gives each shard its map; its output
  // type is the type of the summed output, the shards themselves compute fp32). The first overload
  // splits the experts contiguously (contiguous_expert_maps), the second takes one map per context
  // (check_expert_partition). Throws fp4cl::Error naming the argument.
  static ExpertParallelMoe create(const std::vector<Context>& devices, const Fp4Experts& experts,
                                  const MoeConfig& config);
  static ExpertParallelMoe create(const std::vector<Context>& devices, const Fp4Experts& experts,
                                  const MoeConfig& config, const std::vector<std::vector<std::int32_t>>& expert_maps);

  // Host arrays, synchronous: x [T, H] BF16 bits, topk_ids [T, k] int32, topk_weights [T, k] fp32,
  // router_logits [T, E_global] fp32 (each exactly that many values). `out` is resized to T × H
  // values; its element type must be the configured output (BF16 bits: std::uint16_t, fp32: float).
  // Returns the shards' statistics added up (per shard: shard_stats()). An invalid expert id is an
  // fp4cl::Error, as MoeLayer::finish reports it, after every shard has finished.
  MoeStats forward_topk(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>& topk_ids,
                        const std::vector<float>& topk_weights, std::int64_t tokens, std::vector<std::uint16_t>& out);
  MoeStats forward_topk(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>& topk_ids,
                        const std::vector<float>& topk_weights, std::int64_t tokens, std::vector<float>& out);
  MoeStats forward_logits(const std::vector<std::uint16_t>& x, const std::vector<float>& router_logits,
                          std::int64_t tokens, std::vector<std::uint16_t>& out);
  MoeStats forward_logits(const std::vector<std::uint16_t>& x, const std::vector<float>& router_logits,
                          std::int64_t tokens, std::vector<float>& out);

  int num_shards() const;
  // Shard s's layer (fp32 output, its expert_map set) and its map [E_global].
  MoeLayer& shard(int s);
  const std::vector<std::int32_t>& expert_map(int s) const;
  // What each shard streamed in the latest forward call.
  const std::vector<MoeStats>& shard_stats() const;

  std::int64_t num_global_experts() const;
  std::int64_t hidden() const;
  int top_k() const;
  MoeOutput output() const;

 private:
  struct Impl;
  explicit ExpertParallelMoe(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fp4cl
