#include "kernels/moe_registry.hpp"

#include <cstdlib>

#include "fp4cl/moe.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

constexpr MoeStrategy kAll[] = {MoeStrategy::grouped, MoeStrategy::decode};

// Defaults by device class. PoCL runs a work-group as a loop over its work-items: small groups,
// one row per work-item with float16 vectors (DEVICES.md). GPUs want wider groups.
MoeTiles default_tiles(MoeStrategy s, const DeviceInfo& device, const MoeProblem& p) {
  const int block = p.scheme.block_size();
  const bool cpu = device.kind == DeviceKind::cpu;
  MoeTiles t;
  t.tile_m = s == MoeStrategy::grouped ? 8 : 1;
  t.local_i = cpu ? block : 64;
  t.local_h = cpu ? 16 : 64;
  return t;
}

std::int64_t default_decode_max_pairs(const DeviceInfo& device) { return device.kind == DeviceKind::cpu ? 16 : 64; }

// "" when a strategy with these tiles can serve the problem on the device, else why not.
std::string refusal(const MoeTiles& t, const DeviceInfo& device, const MoeProblem& p) {
  const int block = p.scheme.block_size();
  if (t.local_i % block != 0)
    return fmt::format("MOE_LOCAL_I = {} is not a multiple of the {} block size {}", t.local_i, to_string(p.scheme.weight), block);
  const auto widest = static_cast<std::size_t>(std::max(t.local_i, t.local_h));
  if (widest > device.max_work_group_size)
    return fmt::format("a work-group of {} exceeds the device's maximum of {}", widest, device.max_work_group_size);
  if (!p.scheme.w4a16()) {
    const auto local_bytes = static_cast<std::uint64_t>(t.tile_m) * static_cast<std::uint64_t>(t.local_i) * 4u;
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

MoeSelection select_moe_strategies(const DeviceInfo& device, const MoeProblem& problem, const std::string& requested) {
  std::string name = requested;
  const char* source = "MoeConfig::kernel";
  if (name.empty()) {
    if (const char* env = std::getenv("FP4CL_MOE_KERNEL"); env && *env) {
      name = env;
      source = "FP4CL_MOE_KERNEL";
    }
  }
  MoeSelection sel;
  sel.decode_max_pairs = default_decode_max_pairs(device);
  if (!name.empty()) {
    bool known = false;
    for (MoeStrategy id : kAll) {
      if (name != to_string(id)) continue;
      known = true;
      const MoeTiles tiles = default_tiles(id, device, problem);
      const std::string why = refusal(tiles, device, problem);
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
    const MoeTiles tiles = default_tiles(id, device, problem);
    const std::string why = refusal(tiles, device, problem);
    if (why.empty()) {
      sel.usable.push_back({id, tiles});
      log::debug("MoE: strategy {} usable (MOE_TILE_M={} MOE_LOCAL_I={} MOE_LOCAL_H={})", to_string(id), tiles.tile_m,
                 tiles.local_i, tiles.local_h);
    } else {
      log::info("MoE: strategy {} refused on {}: {}", to_string(id), device.name, why);
      reasons += fmt::format("\n  {}: {}", to_string(id), why);
    }
  }
  if (sel.usable.empty()) fail("no MoE kernel strategy can run {} on {}:{}", problem.scheme.name(), device.name, reasons);
  return sel;
}

}  // namespace fp4cl
