// How the experts of a MoE layer are split over shards: contiguous expert maps, the check that a
// set of maps owns every global expert once, and the slice of the stacked experts a shard holds.
#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/expert_parallel.hpp"
#include "layers/moe_expert_map.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

std::int64_t local_count(const std::vector<std::int32_t>& map) {
  std::int64_t n = 0;
  for (std::int32_t v : map) n += v != -1;
  return n;
}

// `v` holds E_global equal parts (or is empty): the parts of the local experts, in local order.
template <typename T>
std::vector<T> slice_per_expert(const std::vector<T>& v, const std::vector<std::int64_t>& global_of_local,
                                std::int64_t global_experts, const char* name) {
  if (v.empty()) return {};
  const auto E = static_cast<std::size_t>(global_experts);
  if (v.size() % E != 0)
    fail("slice_experts: Fp4Experts::{} has {} values, not a multiple of the {} experts", name, v.size(), E);
  const std::size_t per = v.size() / E;
  std::vector<T> out;
  out.reserve(per * global_of_local.size());
  for (std::int64_t g : global_of_local) {
    const auto begin = v.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(g));
    out.insert(out.end(), begin, begin + static_cast<std::ptrdiff_t>(per));
  }
  return out;
}

}  // namespace

std::vector<std::vector<std::int32_t>> contiguous_expert_maps(std::int64_t global_experts, int shards) {
  if (shards < 1) fail("contiguous_expert_maps: {} shards; at least 1 is needed", shards);
  if (global_experts < shards)
    fail("contiguous_expert_maps: {} experts cannot be split over {} shards (each shard needs at least one)",
         global_experts, shards);
  if (global_experts > INT32_MAX) fail("contiguous_expert_maps: {} experts exceed the int32 ids", global_experts);
  std::vector<std::vector<std::int32_t>> maps;
  const std::int64_t base = global_experts / shards, extra = global_experts % shards;
  std::int64_t first = 0;
  for (int s = 0; s < shards; ++s) {
    const std::int64_t count = base + (s < extra ? 1 : 0);
    std::vector<std::int32_t> map(static_cast<std::size_t>(global_experts), -1);
    for (std::int64_t l = 0; l < count; ++l) map[static_cast<std::size_t>(first + l)] = static_cast<std::int32_t>(l);
    maps.push_back(std::move(map));
    first += count;
  }
  return maps;
}

Fp4Experts slice_experts(const Fp4Experts& all, const std::vector<std::int32_t>& expert_map) {
  if (static_cast<std::int64_t>(expert_map.size()) != all.num_experts)
    fail("slice_experts: the expert_map has {} entries; the experts are {} (one entry per global expert)",
         expert_map.size(), all.num_experts);
  const std::int64_t n = local_count(expert_map);
  if (n < 1) fail("slice_experts: the expert_map names no local expert (every entry is -1)");
  resolve_expert_map(expert_map, n);  // -1 or [0, n), each local id once: a bijection
  std::vector<std::int64_t> global_of_local(static_cast<std::size_t>(n));
  for (std::size_t g = 0; g < expert_map.size(); ++g)
    if (expert_map[g] >= 0) global_of_local[static_cast<std::size_t>(expert_map[g])] = static_cast<std::int64_t>(g);

  Fp4Experts out;
  out.format = all.format;
  out.num_experts = n;
  out.hidden = all.hidden;
  out.intermediate = all.intermediate;
  const std::int64_t E = all.num_experts;
  out.w13_packed = slice_per_expert(all.w13_packed, global_of_local, E, "w13_packed");
  out.w13_scales = slice_per_expert(all.w13_scales, global_of_local, E, "w13_scales");
  out.w2_packed = slice_per_expert(all.w2_packed, global_of_local, E, "w2_packed");
  out.w2_scales = slice_per_expert(all.w2_scales, global_of_local, E, "w2_scales");
  out.w13_global_scale = slice_per_expert(all.w13_global_scale, global_of_local, E, "w13_global_scale");
  out.w2_global_scale = slice_per_expert(all.w2_global_scale, global_of_local, E, "w2_global_scale");
  out.w13_input_global_scale =
      slice_per_expert(all.w13_input_global_scale, global_of_local, E, "w13_input_global_scale");
  out.w2_input_global_scale = slice_per_expert(all.w2_input_global_scale, global_of_local, E, "w2_input_global_scale");
  out.w13_input_scale = slice_per_expert(all.w13_input_scale, global_of_local, E, "w13_input_scale");
  out.w2_input_scale = slice_per_expert(all.w2_input_scale, global_of_local, E, "w2_input_scale");
  return out;
}

void check_expert_partition(const std::vector<std::vector<std::int32_t>>& expert_maps, std::int64_t global_experts) {
  if (expert_maps.empty()) fail("expert partition: no expert maps (one per shard is needed)");
  std::vector<int> owner(static_cast<std::size_t>(global_experts), -1);
  for (std::size_t s = 0; s < expert_maps.size(); ++s) {
    const auto& map = expert_maps[s];
    if (static_cast<std::int64_t>(map.size()) != global_experts)
      fail("expert partition: the expert_map of shard {} has {} entries; expected {} (one per global expert)", s,
           map.size(), global_experts);
    const std::int64_t n = local_count(map);
    if (n < 1) fail("expert partition: shard {} owns no expert (its expert_map is all -1)", s);
    try {
      resolve_expert_map(map, n);
    } catch (const Error& e) {
      fail("expert partition: shard {}: {}", s, e.what());
    }
    for (std::size_t g = 0; g < map.size(); ++g) {
      if (map[g] < 0) continue;
      if (owner[g] >= 0)
        fail("expert partition: global expert {} is local on shard {} and on shard {}", g, owner[g], s);
      owner[g] = static_cast<int>(s);
    }
  }
  for (std::size_t g = 0; g < owner.size(); ++g)
    if (owner[g] < 0) fail("expert partition: global expert {} is local on no shard", g);
}

}  // namespace fp4cl
