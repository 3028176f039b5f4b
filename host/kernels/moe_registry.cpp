#include "kernels/moe_registry.hpp"

#include <algorithm>
#include <cstdlib>

#include "fp4cl/moe.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

constexpr MoeStrategy kAll[] = {MoeStrategy::grouped, MoeStrategy::decode};

// Defaults by device class. CPUs (PoCL): each work-item owns one SIMD vector of rows, small
// work-groups, tiles sized so the accumulators (2 × tile_m vectors in FC1) stay in registers.
// GPUs: one row per work-item, 64-row groups so a warp's weight reads coalesce.
MoeLayout default_layout(const DeviceInfo& device, unsigned float_width) {
  if (device.kind != DeviceKind::cpu) return {1, 64};
  int vec = 1;
  while (vec < 16 && static_cast<unsigned>(vec) * 2 <= float_width) vec *= 2;
  return {vec, vec};
}

MoeTiles default_tiles(MoeStrategy s, const DeviceInfo& device, const MoeLayout& layout, const MoeProblem& p) {
  const int block = p.scheme.block_size();
  MoeTiles t;
  if (device.kind == DeviceKind::cpu) {
    t.tile_m = s == MoeStrategy::grouped ? (layout.vec >= 16 ? 8 : 4) : 1;
    t.local_i = std::max(1, block / layout.vec);  // a whole FP4 block per work-group
    t.local_h = 2;
  } else {
    t.tile_m = s == MoeStrategy::grouped ? 8 : 1;
    t.local_i = 64;
    t.local_h = 64;
  }
  return t;
}

std::int64_t default_decode_max_pairs(const DeviceInfo& device) { return device.kind == DeviceKind::cpu ? 16 : 64; }

// "" when a strategy with these tiles can serve the problem on the device, else why not.
std::string refusal(const MoeTiles& t, const MoeLayout& layout, const DeviceInfo& device, const MoeProblem& p) {
  const int block = p.scheme.block_size();
  if (!p.scheme.w4a16() && (t.local_i * layout.vec) % block != 0)
    return fmt::format("an FC1 work-group covers {} rows, not a multiple of the {} block size {}", t.local_i * layout.vec,
                       to_string(p.scheme.weight), block);
  const auto widest = static_cast<std::size_t>(std::max(t.local_i, t.local_h));
  if (widest > device.max_work_group_size)
    return fmt::format("a work-group of {} exceeds the device's maximum of {}", widest, device.max_work_group_size);
  if (!p.scheme.w4a16()) {
    const auto local_bytes = static_cast<std::uint64_t>(t.tile_m * t.local_i * layout.vec) * 4u;
    if (local_bytes > device.local_mem_bytes)
      return fmt::format("the FP4 requantization tile needs {} bytes of local memory, the device has {}", local_bytes,
                         device.local_mem_bytes);
  }
  return {};
}

std::string valid_names() {
  std::string s;
  for (MoeStrategy id : kAll) s += (s.empty() ? "" : ", ") + std::string(to_string(id));
  return s;
}

}  // namespace

const char* to_string(MoeStrategy s) { return s == MoeStrategy::grouped ? "grouped" : "decode"; }

std::vector<std::string> moe_kernel_strategies() {
  std::vector<std::string> names;
  for (MoeStrategy id : kAll) names.emplace_back(to_string(id));
  return names;
}

const MoeSelection::Entry& MoeSelection::for_tokens(std::int64_t tokens, int top_k) const {
  if (forced || usable.size() == 1) return usable.front();
  const std::int64_t pairs = tokens * top_k;
  for (const Entry& e : usable) {
    if (e.id == MoeStrategy::decode && pairs > decode_max_pairs) {
      log::debug("MoE: {} tokens × k = {} pairs: decode refused (it serves up to {} pairs)", tokens, pairs,
                 decode_max_pairs);
      continue;
    }
    if (e.id == MoeStrategy::grouped && pairs <= decode_max_pairs) {
      log::debug("MoE: {} tokens × k = {} pairs: grouped refused (decode serves up to {} pairs)", tokens, pairs,
                 decode_max_pairs);
      continue;
    }
    return e;
  }
  return usable.front();
}

MoeSelection select_moe_strategies(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                   const std::string& requested) {
  std::string name = requested;
  const char* source = "MoeConfig::kernel";
  if (name.empty()) {
    if (const char* env = std::getenv("FP4CL_MOE_KERNEL"); env && *env) {
      name = env;
      source = "FP4CL_MOE_KERNEL";
    }
  }
  MoeSelection sel;
  sel.layout = default_layout(device, float_width);
  sel.decode_max_pairs = default_decode_max_pairs(device);
  if (!name.empty()) {
    bool known = false;
    for (MoeStrategy id : kAll) {
      if (name != to_string(id)) continue;
      known = true;
      const MoeTiles tiles = default_tiles(id, device, sel.layout, problem);
      const std::string why = refusal(tiles, sel.layout, device, problem);
      if (!why.empty()) fail("MoE kernel strategy '{}' ({}) cannot run on {}: {}", name, source, device.name, why);
      sel.usable.push_back({id, tiles});
      sel.forced = true;
    }
    if (!known) fail("unknown MoE kernel strategy '{}' ({}); valid: {}", name, source, valid_names());
    log::info("MoE: strategy {} forced by {}", name, source);
    return sel;
  }
  std::string reasons;
  for (MoeStrategy id : kAll) {
    const MoeTiles tiles = default_tiles(id, device, sel.layout, problem);
    const std::string why = refusal(tiles, sel.layout, device, problem);
    if (why.empty()) {
      sel.usable.push_back({id, tiles});
      log::debug("MoE: strategy {} usable (MOE_VEC={} MOE_GROUP={} MOE_TILE_M={}, local sizes {} and {})",
                 to_string(id), sel.layout.vec, sel.layout.group, tiles.tile_m, tiles.local_i, tiles.local_h);
    } else {
      log::info("MoE: strategy {} refused on {}: {}", to_string(id), device.name, why);
      reasons += fmt::format("\n  {}: {}", to_string(id), why);
    }
  }
  if (sel.usable.empty()) fail("no MoE kernel strategy can run {} on {}:{}", problem.scheme.name(), device.name, reasons);
  return sel;
}

}  // namespace fp4cl
