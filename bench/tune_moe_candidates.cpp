#include "tune_moe_candidates.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"

namespace fp4cl::bench {

ScopedTiles::ScopedTiles(const std::string& value) {
  if (const char* old = std::getenv("FP4CL_MOE_TILES")) {
    had_ = true;
    old_ = old;
  }
  ::setenv("FP4CL_MOE_TILES", value.c_str(), 1);
}

ScopedTiles::~ScopedTiles() {
  if (had_) ::setenv("FP4CL_MOE_TILES", old_.c_str(), 1);
  else ::unsetenv("FP4CL_MOE_TILES");
}

std::vector<std::string> moe_tune_strategies(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                             const std::vector<std::string>& requested) {
  const std::vector<std::string> all = moe_kernel_strategies();
  if (!requested.empty()) {
    std::vector<std::string> out;
    for (const std::string& s : requested) {
      if (std::find(all.begin(), all.end(), s) == all.end()) {
        std::string valid;
        for (const std::string& a : all) valid += (valid.empty() ? "" : ", ") + a;
        throw Error(fmt::format("--kernel: unknown MoE strategy '{}'; valid: {}", s, valid));
      }
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
  }
  bool mma = mma_native(device);
  if (mma) {
    const ScopedTiles builtin("");
    try {
      select_moe_strategies(device, float_width, problem, "mma");
    } catch (const Error&) {
      mma = false;  // its built-in tiles cannot serve the problem: grouped does
    }
  }
  std::vector<std::string> out;
  for (const std::string& s : all) {
    if (s == "split" && device.kind == DeviceKind::cpu) continue;  // CPUs: split only when forced
    if (s == "mma" && !mma) continue;                               // emulated: only when forced
    if (s == "grouped" && mma) continue;                            // mma serves its chunks
    out.push_back(s);
  }
  return out;
}

bool mma_few_pairs_bucket(std::int64_t tokens, int top_k, std::int64_t experts, long long tile_m) {
  return mma_few_pairs_chunk(tokens * top_k, experts, static_cast<int>(tile_m));
}

bool mma_routed_bucket(std::int64_t tokens, int top_k, bool few_pairs) {
  return few_pairs && tokens > 1 && tokens * top_k <= kMmaRoutedPairs;
}

std::vector<ParamAxis> moe_axes(const std::string& strategy, bool with_layout, bool few_pairs, DeviceKind kind,
                                bool routed, bool quantized_activations) {
  if (strategy == "mma") {
    if (routed) {  // 0: automatic (W4A16 1 row tile, W4A4 2; one block)
      std::vector<ParamAxis> axes = {{"few_split_k", {0, 1, 2, 4, 8}},  {"unroll", {1, 2, 4, 8}},
                                     {"fc2_unroll", {1, 2, 4, 8}},       {"routed_row_tiles", {0, 1, 2, 4}},
                                     {"routed_row_loop", {0, 2, 4}},     {"token_fc2_warp_tiles", {0, 2, 4}}};
      if (quantized_activations) axes.push_back({"routed_warp_tiles", {0, 2, 4}});  // W4A4's routed FC1 only
      return axes;
    }
    if (few_pairs) return {{"few_split_k", {0, 1, 2, 4, 8}}, {"unroll", {1, 2, 4, 8}}, {"fc2_unroll", {1, 2, 4, 8}}};
    return {{"tile_m", {8, 16, 32, 64}},
            {"local_i", {32, 64, 128, 256}},
            {"local_h", {32, 64, 128, 256}},
            {"split_k", {0, 1, 2, 4}},
            {"stage", {0, 1}},
            {"warp_tiles", {1, 2, 4}}};
  }
  const bool cpu = kind == DeviceKind::cpu;
  std::vector<ParamAxis> axes;
  if (with_layout) {
    axes.push_back({"vec", cpu ? std::vector<long long>{4, 8, 16} : std::vector<long long>{1, 2, 4}});
    axes.push_back({"group", cpu ? std::vector<long long>{8, 16, 32} : std::vector<long long>{32, 64, 128}});
  }
  if (strategy != "decode") axes.push_back({"tile_m", {2, 4, 8}});
  axes.push_back({"local_i", cpu ? std::vector<long long>{1, 2, 4, 8} : std::vector<long long>{32, 64, 128}});
  axes.push_back({"local_h", cpu ? std::vector<long long>{1, 2, 4, 8} : std::vector<long long>{32, 64, 128}});
  return axes;
}

tuning::Params moe_default_params(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                  const std::string& strategy) {
  const ScopedTiles builtin("");
  const MoeSelection sel = select_moe_strategies(device, float_width, problem, strategy);
  const MoeTiles& t = sel.usable.back().tiles;  // the strategy's tiles for the largest calls
  tuning::Params p = {{"vec", sel.layout.vec},  {"group", sel.layout.group}, {"tile_m", t.tile_m},
                      {"local_i", t.local_i},   {"local_h", t.local_h}};
  if (strategy == "mma") {
    p["split_k"] = t.split_k;
    p["few_split_k"] = t.few_split_k;
    p["unroll"] = t.unroll;
    p["stage"] = t.stage;
    p["warp_tiles"] = t.warp_tiles;
  }
  return p;
}

std::string moe_tiles_env(const std::string& strategy, const tuning::Params& params) {
  std::string s;
  for (const auto& [k, v] : params) {
    const bool layout = k == "vec" || k == "group";
    s += fmt::format("{}{}{}={}", s.empty() ? "" : ",", layout ? "" : strategy + ".", k, v);
  }
  return s;
}

std::string moe_candidate_refusal(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                  const std::string& strategy, const tuning::Params& params) {
  const ScopedTiles tiles(moe_tiles_env(strategy, params));
  try {
    select_moe_strategies(device, float_width, problem, strategy);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace fp4cl::bench
