#include "tuning/moe_tuning.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kernels/mma_tile_values.hpp"
#include "support/log.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl::tuning {

namespace {

// Whether `value` is a valid value of parameter `name` in an entry `kernel` won.
bool valid_value(const std::string& kernel, const std::string& name, long long v) {
  const bool mma = kernel == "mma";
  if (const MmaTileKey* key = mma_tile_key(name); key && mma) return key->tuned && key->takes(v);
  if (name == "vec") return v == 1 || v == 2 || v == 4 || v == 8 || v == 16;
  if (name == "tile_m") return v == 1 || v == 2 || v == 4 || v == 8;  // mma's: kMmaTileKeys
  if (name == "group" || name == "local_i" || name == "local_h") return v >= 1 && v <= 4096;
  if (name == "split_k" || name == "few_split_k") return mma && v >= 0 && v <= 64;  // 0: mma_auto_split_k
  return false;
}

// The layer's entries by increasing bucket; none, with a warning, when one names an unknown
// strategy or holds an invalid value.
std::vector<const Entry*> usable_entries(const Match& match) {
  for (const Entry* e : match.entries) {
    if (e->kernel != "split" && e->kernel != "decode" && e->kernel != "grouped" && e->kernel != "mma") {
      log::warn("tuning database ({}): unknown MoE strategy '{}' for {} tokens; built-in MoE tiles used", e->origin,
                e->kernel, e->tokens);
      return {};
    }
    for (const auto& [name, value] : e->params) {
      if (!valid_value(e->kernel, name, value)) {
        log::warn("tuning database ({}): MoE parameter {} = {} of strategy {} for {} tokens is not valid; built-in "
                  "MoE tiles used",
                  e->origin, name, value, e->kernel, e->tokens);
        return {};
      }
    }
  }
  return match.entries;
}

// Every bucket `kernel` won among `entries`, as MoeTuned::grouped and MoeTuned::mma list them.
std::vector<MoeBucket> strategy_buckets(const std::vector<const Entry*>& entries, const std::string& kernel) {
  std::vector<const Entry*> won;
  for (const Entry* e : entries)
    if (e->kernel == kernel) won.push_back(e);
  std::vector<MoeBucket> out;
  for (std::size_t i = 0; i < won.size(); ++i) {
    MoeBucket b;
    b.tokens = won[i]->tokens;
    b.origin = won[i]->origin;
    b.last_tokens = i + 1 < won.size() ? last_tokens_of_bucket(won[i]->tokens, won[i + 1]->tokens)
                                       : std::numeric_limits<std::int64_t>::max();
    for (const auto& [name, value] : won[i]->params)
      if (name != "vec" && name != "group") b.tiles[name] = static_cast<int>(value);
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

LookupKey moe_lookup_key(const MoeShapeKey& key) {
  return {"moe",
          scheme_key(key.scheme),
          {{"hidden", key.hidden}, {"inter", key.inter}, {"experts", key.experts}, {"topk", key.top_k}}};
}

MoeTuned moe_tuned(const DeviceInfo& device, const MoeShapeKey& key) {
  const LookupKey lookup = moe_lookup_key(key);
  const Match match = tuning_store()->lookup(device, lookup);
  const std::vector<const Entry*> entries = usable_entries(match);
  MoeTuned tuned;
  if (entries.empty()) return tuned;
  tuned.grouped = strategy_buckets(entries, "grouped");
  tuned.mma = strategy_buckets(entries, "mma");
  std::map<std::string, int>& out = tuned.overrides;
  const Entry* first_decode = nullptr;
  const Entry* last_grouped = nullptr;
  const Entry* first_split = nullptr;
  const Entry* first_mma = nullptr;
  const Entry* last_mma = nullptr;
  std::size_t first_not_split_index = entries.size();
  std::size_t first_many_index = entries.size();  // the first bucket grouped or mma won
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = *entries[i];
    if (e.kernel != "split") first_not_split_index = std::min(first_not_split_index, i);
    if (e.kernel == "split") {
      if (!first_split) first_split = &e;
    } else if (e.kernel == "decode") {
      if (!first_decode) first_decode = &e;
    } else {
      if (e.kernel == "grouped") last_grouped = &e;
      if (e.kernel == "mma") {
        if (!first_mma) first_mma = &e;
        last_mma = &e;
      }
      first_many_index = std::min(first_many_index, i);
    }
  }
  // One crossover: decode up to the bucket before the first one `grouped` or `mma` won (none
  // when decode won no bucket).
  std::int64_t decode_max_tokens = std::numeric_limits<int>::max() / key.top_k;
  if (first_many_index == 0 || !first_decode) decode_max_tokens = 0;
  else if (first_many_index < entries.size())
    decode_max_tokens = last_tokens_of_bucket(entries[first_many_index - 1]->tokens,
                                              entries[first_many_index]->tokens);
  // The layout is one per layer: the smallest bucket's.
  const Entry& layout = *entries.front();
  for (const char* name : {"vec", "group"}) {
    const auto it = layout.params.find(name);
    if (it != layout.params.end()) out[name] = static_cast<int>(it->second);
  }
  // Split (GPUs) up to the bucket before the first one another strategy won.
  if (first_split) {
    std::int64_t split_max_tokens = std::numeric_limits<int>::max() / key.top_k;
    if (first_not_split_index == 0) split_max_tokens = 0;
    else if (first_not_split_index < entries.size())
      split_max_tokens = last_tokens_of_bucket(entries[first_not_split_index - 1]->tokens,
                                               entries[first_not_split_index]->tokens);
    out["split_max_pairs"] = static_cast<int>(split_max_tokens * key.top_k);
  }
  std::map<std::string, std::vector<std::string>> tiles_files;  // per strategy, as MoeTuned::tiles_origin
  const auto take = [&](const Entry* e, std::initializer_list<const char*> names) {
    if (!e) return;
    bool taken = false;
    for (const char* name : names) {
      const auto it = e->params.find(name);
      if (it != e->params.end()) {
        out[e->kernel + "." + name] = static_cast<int>(it->second);
        taken = true;
      }
    }
    if (!taken) return;
    std::vector<std::string>& files = tiles_files[e->kernel];
    if (std::find(files.begin(), files.end(), e->origin) == files.end()) files.push_back(e->origin);
  };
  // grouped: the largest bucket's tiles here; every bucket's serve its own counts (`grouped`).
  for (const Entry* e : {first_decode, last_grouped, first_split}) take(e, {"tile_m", "local_i", "local_h"});
  // decode and split take one set of tiles: say which buckets' tiles a layer does not take (they
  // still set the crossovers), so that a bucket tuned for, say, 8 tokens is not believed to serve
  // them.
  for (const Entry* used : {first_decode, first_split}) {
    if (!used) continue;
    std::vector<std::int64_t> unused;
    for (const Entry* e : entries)
      if (e->kernel == used->kernel && e != used) unused.push_back(e->tokens);
    if (unused.empty()) continue;
    const std::string line = fmt::format(
        "tuning ({}): {} layers take {}'s tiles from bucket {} for every count they run; those of bucket(s) {} are "
        "not used (one set of tiles a strategy)",
        used->origin, lookup.describe(), used->kernel, used->tokens, fmt::join(unused, ", "));
    static std::mutex mutex;
    static std::set<std::string> said;  // once a process, like the store's line
    std::lock_guard<std::mutex> lock(mutex);
    if (said.insert(line).second) log::info("{}", line);
  }
  // mma: the tiles of chunks with many pairs from its largest bucket, those of chunks with few
  // pairs (mma_few_pairs_tiles, the routed FC1's row tiles and blocks) from its smallest (every
  // bucket's serve its own counts: `mma`).
  take(first_mma,
       {"few_split_k", "unroll", "fc2_unroll", "routed_row_tiles", "routed_row_loop", "routed_warp_tiles",
        "token_fc2_warp_tiles"});
  take(last_mma, {"tile_m", "local_i", "local_h", "split_k", "stage", "warp_tiles"});
  out["decode_max_pairs"] = static_cast<int>(decode_max_tokens * key.top_k);
  for (const auto& [kernel, files] : tiles_files) tuned.tiles_origin[kernel] = fmt::format("{}", fmt::join(files, ", "));
  return tuned;
}

}  // namespace fp4cl::tuning
