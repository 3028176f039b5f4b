#include "kernels/moe_registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "fp4cl/moe.hpp"
#include "kernels/mma_tile_values.hpp"
#include "support/check.hpp"
#include "support/log.hpp"
#include "tuning/moe_tuning.hpp"

namespace fp4cl {

namespace {

constexpr MoeStrategy kAll[] = {MoeStrategy::grouped, MoeStrategy::decode, MoeStrategy::split, MoeStrategy::mma};

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
  if (s == MoeStrategy::split) {
    // GPUs: FC1 work-groups of 128 work-items, each with 4 rows (at least a whole block of rows
    // under W4A4), so that a step's activations read from local memory serve 4 rows; FC2: 256.
    // Measured on an H100 (bench/gpu/sweep-split.sh, NVFP4 W4A16, FC1 µs): qwen3-30b-a3b T = 1
    // 17.9 (256 × 1 row: 17.4–18.4), T = 8 72.7 (81–85); mixtral-8x7b T = 1 97 (88), T = 8 with
    // passes shared by 2 pairs 554 (1122). CPUs (split only when asked for): 64 work-items.
    const bool cpu = device.kind == DeviceKind::cpu;
    t.local_i = cpu ? 64 : 128;
    t.local_h = cpu ? 64 : 256;
    const int lanes = std::max(1, std::min(split_lanes(p.hidden), t.local_i));
    const int blocks_rows = p.scheme.w4a16() ? 1 : std::max(1, block / (t.local_i / lanes));
    t.tile_m = cpu ? blocks_rows : std::max(4, blocks_rows);
    return t;
  }
  if (s == MoeStrategy::mma) {
    // Chunks with many pairs per expert (those with few take mma_few_pairs_tiles): tiles of 32
    // pairs, work-groups of one warp and one row tile (two in FC1 where a W4A4 block of 32 rows
    // must sit in one work-group), activations read from global memory, no K split. Measured on
    // an H200 (2026-11-29, `FP4CL_MOE_TILES` tile_m:local_i:local_h:split_k:stage, µs, T = 64 /
    // 512 for mixtral-8x7b, 256 / 512 for qwen3-30b-a3b, 128 / 512 for gpt-oss-20b) against the
    // tiles before, 8 row tiles (W4A4 FC1: 4) sharing staged activations (32:256:256:1:1), chosen
    // on an H100 before the MMA layout's k map made each lane's activations two 16-byte loads:
    // mixtral NVFP4 W4A16 444 / 1904 against 1107 / 4151, W4A4 502 / 2137 against 1141 / 4356;
    // qwen3 W4A16 292 / 457 against 509 / 787, W4A4 334 / 524 against 556 / 831; gpt-oss MXFP4
    // W4A16 311 / 733 against 863 / 1900, W4A4 (32:64:32) 339 / 815 against 719 / 1596. Others
    // within a few % or slower: 2 or 4 row tiles unstaged (mixtral W4A16 498 / 2153, 497 / 2166),
    // K split over 2 warps (442 / 1930; W4A4 476 / 2123, qwen3 W4A4 353 / 548), tiles of 64 pairs
    // (693 / 2025) or 16 (536 / 2454).
    t.tile_m = 32;
    t.split_k = 1;
    t.local_i = p.scheme.w4a16() || block <= 16 ? 32 : 64;
    t.local_h = 32;
    t.stage = 0;
    // One row tile a warp: several (warp_tiles, each B fragment serving them all) won only in some
    // buckets on an H200 (2026-11-29, 2 alternating rounds, µs, T = 64 / 512, tiles 32:32:32 with
    // warp_tiles 1 / 2 / 4): mixtral NVFP4 W4A16 452, 450 / 1902, 1905 against 515, 511 / 1845,
    // 1843 and 1133 / 4235 (4: slower everywhere); W4A4 510 / 2157 against 602 / 2106; qwen3 T =
    // 512 W4A16 462 against 496, W4A4 529 against 574; with tiles of 64 pairs and 2 row tiles a
    // warp mixtral W4A4 T = 512 1844 / 1843 (T = 64 729). The tuning database gives those
    // buckets theirs (tuning/nvidia-h200.json).
    t.warp_tiles = 1;
    // Chunks of few pairs (unstaged K loops): each warp loads 8 chunks of weights (NVFP4 W4A16) or
    // 4 (the rest) before their MMAs. Measured on an H100 (NVFP4 W4A16, µs, unroll 1 / 2 / 4 / 8, one
    // run each, 2026-11-23): mixtral-8x7b T = 1 139 / 134 / 123 / 132, T = 8 330 / 317 / 293 / 312;
    // qwen3-30b-a3b T = 8 112 / 106 / 103 / 119. Since the BF16 activation rows and the k map
    // (2026-11-27, 3 alternating rounds, unroll 4 -> 8): W4A16 qwen3 T = 8 82.7 / 83.5 / 85.0 ->
    // 78.1 / 77.3 / 81.9, T = 64 level (201-202 -> 203-204), mixtral T = 1 90.4 -> 88.3-89.6, T = 8
    // 248.8-249.3 -> 243.7-245.5; W4A4 slower with 8 (qwen3 T = 64 223-232 -> 225-241, mixtral T = 8
    // 268-273 -> 275-281) and MXFP4 W4A16 too (gpt-oss-20b T = 1 39.4 / 39.7 -> 42.5 / 43.3, T = 8
    // level at 135-136), so they keep 4. CPUs run the emulated MMA (forced only: tests): no loads
    // ahead, which buy nothing there, and a second inlined K loop (the remainder) is more code for
    // PoCL to compile in each unstaged program (as linear mma's MMA_UNROLL 1 on CPUs).
    t.unroll = device.kind == DeviceKind::cpu ? 1 : p.scheme.w4a16() && p.scheme.weight == WeightFormat::nvfp4 ? 8 : 4;
    return t;
  }
  if (device.kind == DeviceKind::cpu) {
    // grouped: 8 pairs a tile on 16-lane vectors, 2 on 8-lane ones (AVX2, where tiles of up to 4
    // pairs take the integer dot products; their 4-pair loops probably outgrow the 16 vector
    // registers, not checked in the disassembly), else 4. 8-lane, built-in tiles, 2 alternating
    // rounds (2 AVX2 cores of an AMD EPYC, 2026-12-05), tile_m 4 -> 2, ms: mixtral-8x7b T = 8 W4A16
    // 160 / 151 -> 92 / 89, W4A4 141 / 133 -> 63 / 58; gpt-oss-20b MXFP4 T = 64 W4A16 292 / 288 ->
    // 214 / 244, W4A4 309 / 282 -> 152 / 169; qwen3-235b-a22b and gpt-oss-20b T = 8 level. The
    // tuner chose 2 for qwen3-30b-a3b's T = 8 and 512 there too (tuning/pocl-cpu.json).
    t.tile_m = s == MoeStrategy::grouped ? (layout.vec >= 16 ? 8 : layout.vec == 8 ? 2 : 4) : 1;
    t.local_i = std::max(1, block / layout.vec);  // a whole FP4 block per work-group
    t.local_h = 2;
  } else {
    t.tile_m = s == MoeStrategy::grouped ? 8 : 1;
    t.local_i = 64;
    t.local_h = 64;
  }
  return t;
}

// CPUs: decode (one weight pass a pair) up to 16 pairs, and no more pairs than local experts:
// beyond that some expert has 2 pairs, which decode streams twice and grouped once. mixtral-8x7b
// (8 experts, k = 2), T = 5 / 6 / 7 / 8, median of 3 alternating rounds, decode against grouped
// (tiles of 2), ms: W4A16 35.9 / 41.1 / 46.2 / 59.4 against 31.4 / 40.7 / 50.2 / 53.2, W4A4 30.2 /
// 37.4 / 45.1 / 49.2 against 26.4 / 29.7 / 32.3 / 40.5 (2 AVX2 cores of an AMD EPYC, 2026-12-06).
std::int64_t default_decode_max_pairs(const DeviceInfo& device, const MoeProblem& p) {
  return device.kind == DeviceKind::cpu ? std::min<std::int64_t>(16, p.local_experts) : 64;
}
// GPUs: split while each expert gets at most ~2 pairs on average (it streams an expert once per
// pair), and up to 512 pairs. Measured on an H100 (bench/gpu/results-h100.md, every strategy
// forced): split is 2-20x faster at T = 1 and 8 on qwen3-30b-a3b and mixtral-8x7b, level with
// grouped at 512 pairs over 128 experts, 1.5x slower at 128 pairs over 8 experts.
std::int64_t default_split_max_pairs(const DeviceInfo& device, const MoeProblem& p) {
  return device.kind == DeviceKind::cpu ? 0 : std::min<std::int64_t>(512, 2 * p.local_experts);
}

// "" when the split strategy with these tiles can serve the problem on the device, else why not.
std::string split_refusal(const MoeTiles& t, const DeviceInfo& device, const MoeProblem& p) {
  if (p.hidden % 32 != 0 || p.intermediate % 32 != 0)
    return fmt::format("H = {} and I = {} must be multiples of 32", p.hidden, p.intermediate);
  const SplitGeometry g = split_geometry(t, p);
  // The split layout splits every row over split_lanes(K) lanes: a work-group holds whole rows.
  if (t.local_i % g.lanes1 != 0)
    return fmt::format("the FC1 work-group of {} is not a multiple of the {} lanes per row of the split layout (K = H = {})",
                       t.local_i, g.lanes1, p.hidden);
  if (t.local_h % g.lanes2 != 0)
    return fmt::format("the FC2 work-group of {} is not a multiple of the {} lanes per row of the split layout (K = I = {})",
                       t.local_h, g.lanes2, p.intermediate);
  const auto widest = static_cast<std::size_t>(std::max(g.local1, g.local2()));
  if (widest > device.max_work_group_size)
    return fmt::format("a work-group of {} exceeds the device's maximum of {}", widest, device.max_work_group_size);
  const int block = p.scheme.block_size();
  if (!p.scheme.w4a16() && g.rows1() % block != 0)
    return fmt::format("an FC1 work-group covers {} rows, not a multiple of the {} block size {}", g.rows1(),
                       to_string(p.scheme.weight), block);
  const auto local_bytes = static_cast<std::uint64_t>(p.hidden + 2 * g.rows1() * g.lanes1 + g.rows1()) * 4u;
  if (local_bytes > device.local_mem_bytes)
    return fmt::format("FC1 needs {} bytes of local memory (the token's H = {} activations), the device has {}",
                       local_bytes, p.hidden, device.local_mem_bytes);
  return {};
}

// "" when the mma strategy with these tiles can serve the problem on the device, else why not.
std::string mma_tiles_refusal(const MoeTiles& t, const DeviceInfo& device, const MoeProblem& p);

std::string mma_refusal(const MoeTiles& t, const DeviceInfo& device, const MoeProblem& p) {
  if (p.hidden % 64 != 0 || p.intermediate % 64 != 0)
    return fmt::format("H = {} and I = {} must be multiples of 64 (the MMA layout's chunks)", p.hidden, p.intermediate);
  for (const bool one_token : {false, true})
    if (std::string why = mma_tiles_refusal(mma_few_pairs_tiles(t, p, one_token), device, p); !why.empty())
      return "with the tiles for few pairs: " + why;
  return mma_tiles_refusal(t, device, p);
}

std::string mma_tiles_refusal(const MoeTiles& t, const DeviceInfo& device, const MoeProblem& p) {
  for (const MmaTileKey& key : kMmaTileKeys)  // the keys of a few values, in that table's order
    if (!key.takes(t.*key.field))
      return fmt::format("{} = {} must be {}", key.name, t.*key.field, mma_tile_values_text(key));
  if (t.routed_fc2 == 2 && static_cast<std::uint64_t>(32) * p.top_k > device.max_work_group_size)
    return fmt::format("routed_fc2 = 2: a work-group of 32 · top_k = {} work-items exceeds the device's maximum of {}",
                       32 * p.top_k, device.max_work_group_size);
  const int split_k = std::max(1, t.split_k);  // 0: automatic, row tiles only in local_i / local_h
  if (t.split_k < 0 || t.local_i % (32 * split_k) != 0 || t.local_h % (32 * split_k) != 0)
    return fmt::format("the work-groups of {} and {} must be multiples of 32 · split_k = {}", t.local_i, t.local_h,
                       32 * split_k);
  const MmaGeometry g = mma_geometry(t, p);
  if (p.intermediate % g.fc1.rows() != 0 || p.hidden % g.fc2.rows() != 0)
    return fmt::format("I = {} and H = {} must be multiples of the {} and {} rows of the FC1 and FC2 work-groups",
                       p.intermediate, p.hidden, g.fc1.rows(), g.fc2.rows());
  if (!p.scheme.w4a16() && g.fc1.rows() % p.scheme.block_size() != 0)
    return fmt::format("an FC1 work-group covers {} rows, not a multiple of the {} block size {}", g.fc1.rows(),
                       to_string(p.scheme.weight), p.scheme.block_size());
  if (t.routed_row_tiles > 0) {  // the routed FC1's work-groups (moe_pipeline.cpp)
    const MmaGemm f = mma_geometry(mma_few_pairs_tiles(t, p), p).fc1;
    const int rows = 16 * t.routed_row_tiles;
    if (p.intermediate % rows != 0 || (!p.scheme.w4a16() && rows % p.scheme.block_size() != 0))
      return fmt::format("routed_row_tiles = {}: the routed FC1's work-groups of {} rows must divide I = {}{}",
                         t.routed_row_tiles, rows, p.intermediate,
                         p.scheme.w4a16() ? "" : fmt::format(" and be whole {} blocks of {}", to_string(p.scheme.weight),
                                                             p.scheme.block_size()));
    if (static_cast<std::size_t>(32 * t.routed_row_tiles * f.ks) > device.max_work_group_size)
      return fmt::format("routed_row_tiles = {}: the routed FC1's work-groups of 32 · {} · {} work-items exceed the "
                         "device's maximum of {}",
                         t.routed_row_tiles, t.routed_row_tiles, f.ks, device.max_work_group_size);
  }
  if (t.routed_row_loop > 1) {  // the routed FC1's blocks of rows (moe_pipeline.cpp)
    const int rt = t.routed_row_tiles > 0 ? t.routed_row_tiles
                   : p.scheme.w4a16()     ? mma_geometry(mma_few_pairs_tiles(t, p), p).fc1.rt
                                          : mma_routed_local_row_tiles(p.intermediate, p.scheme.block_size(),
                                                                       mma_geometry(mma_few_pairs_tiles(t, p), p).fc1.rt);
    if (p.intermediate % (16 * rt * t.routed_row_loop) != 0)
      return fmt::format("routed_row_loop = {}: {} blocks of the routed FC1's {} rows do not divide I = {}",
                         t.routed_row_loop, t.routed_row_loop, 16 * rt, p.intermediate);
  }
  if (t.routed_warp_tiles > 1 && !p.scheme.w4a16()) {  // the routed W4A4 FC1's rows (moe_pipeline.cpp)
    const int rt = t.routed_row_tiles > 0 ? t.routed_row_tiles
                                          : mma_routed_local_row_tiles(p.intermediate, p.scheme.block_size(),
                                                                       mma_geometry(mma_few_pairs_tiles(t, p), p).fc1.rt);
    if (p.intermediate % (16 * rt * t.routed_warp_tiles) != 0)
      return fmt::format("routed_warp_tiles = {}: the routed FC1's work-groups of {} rows do not divide I = {}",
                         t.routed_warp_tiles, 16 * rt * t.routed_warp_tiles, p.intermediate);
  }
  const auto widest = static_cast<std::size_t>(std::max(g.fc1.local(), g.fc2.local()));
  if (widest > device.max_work_group_size)
    return fmt::format("a work-group of {} exceeds the device's maximum of {}", widest, device.max_work_group_size);
  // Local arrays: staged activations or the slices' partial sums, W4A4's a values.
  for (const auto& [gemm, mats, name] : {std::tuple<MmaGemm, int, const char*>{g.fc1, 2, "FC1"}, {g.fc2, 1, "FC2"}}) {
    const std::uint64_t a_values = mats == 2 && !p.scheme.w4a16() ? 8u * g.nt * gemm.rows() : 0u;
    const std::uint64_t local_bytes = 4u * (gemm.shared_words(g.nt, mats) + a_values);
    if (local_bytes > device.local_mem_bytes)
      return fmt::format("{} needs {} bytes of local memory, the device has {}", name, local_bytes,
                         device.local_mem_bytes);
  }
  return {};
}

// "" when a strategy with these tiles can serve the problem on the device, else why not.
std::string refusal(MoeStrategy id, const MoeTiles& t, const MoeLayout& layout, const DeviceInfo& device,
                    const MoeProblem& p) {
  if (id == MoeStrategy::split) return split_refusal(t, device, p);
  if (id == MoeStrategy::mma) return mma_refusal(t, device, p);
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

// The keys of FP4CL_MOE_TILES, and whether 0 is one of a key's values (an automatic choice, or
// mma.stage's "unstaged").
struct TileKey {
  const char* name;
  bool zero_ok;
};
// An mma key of a few values ("mma.unroll"): 0 where kMmaTileKeys lists it (a name not there
// does not compile).
constexpr TileKey mma_values_key(const char* name) {
  return {name, mma_tile_key(std::string_view(name).substr(4))->takes(0)};
}
constexpr TileKey kTileKeys[] = {
    {"vec", false},           {"group", false},           {"decode_max_pairs", false}, {"split_max_pairs", false},
    {"grouped.tile_m", false}, {"grouped.local_i", false}, {"grouped.local_h", false}, {"decode.tile_m", false},
    {"decode.local_i", false}, {"decode.local_h", false},  {"split.tile_m", false},    {"split.local_i", false},
    {"split.local_h", false},  mma_values_key("mma.tile_m"), {"mma.local_i", false}, {"mma.local_h", false},
    {"mma.split_k", true},     {"mma.few_split_k", true},
    mma_values_key("mma.unroll"),           mma_values_key("mma.fc2_unroll"),
    mma_values_key("mma.row_loop"),         mma_values_key("mma.stage"),
    mma_values_key("mma.warp_tiles"),       mma_values_key("mma.routed_warp_tiles"),
    mma_values_key("mma.routed_row_tiles"), mma_values_key("mma.routed_row_loop"),
    mma_values_key("mma.routed_fc2"),       mma_values_key("mma.token_fc2_warp_tiles"),
    mma_values_key("mma.route_logits")};

// FP4CL_MOE_TILES, parsed: "key=value,..." with positive integer values (0 as well where the key
// takes it).
std::map<std::string, int> tile_overrides() {
  std::map<std::string, int> out;
  const char* env = std::getenv("FP4CL_MOE_TILES");
  if (!env) return out;
  const std::string spec(env);
  std::size_t pos = 0;
  while (pos < spec.size()) {
    const std::size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const auto* known = std::find_if(std::begin(kTileKeys), std::end(kTileKeys),
                                     [&](const TileKey& k) { return key == k.name; });
    if (known == std::end(kTileKeys)) {
      std::string names;
      for (const TileKey& k : kTileKeys) names += (names.empty() ? "" : ", ") + std::string(k.name);
      fail("FP4CL_MOE_TILES: unknown key '{}'; keys: {}", key, names);
    }
    std::size_t used = 0;
    int value = 0;
    try {
      if (eq != std::string::npos) value = std::stoi(item.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || used == 0 || used != item.size() - eq - 1 || value < (known->zero_ok ? 0 : 1))
      fail("FP4CL_MOE_TILES: '{}' is not key={} integer", item, known->zero_ok ? "non-negative" : "positive");
    out[key] = value;
  }
  return out;
}

void apply(const std::map<std::string, int>& o, const std::string& key, int& field) {
  if (const auto it = o.find(key); it != o.end()) field = it->second;
}

std::string valid_names() {
  std::string s;
  for (MoeStrategy id : kAll) s += (s.empty() ? "" : ", ") + std::string(to_string(id));
  return s;
}

// Whether `key` is one of strategy `id`'s keys ("mma.tile_m" for mma) in FP4CL_MOE_TILES form.
bool strategy_key(const std::string& key, MoeStrategy id) {
  const std::string_view name = to_string(id);
  return key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '.';
}

// "tile_m 8, local sizes 64 and 128" (mma: with its K splits, unroll, staging and row tiles a
// warp; the routed W4A4 FC1's where they are set, not automatic).
std::string describe_tiles(MoeStrategy id, const MoeTiles& t) {
  std::string s = fmt::format("tile_m {}, local sizes {} and {}", t.tile_m, t.local_i, t.local_h);
  if (id == MoeStrategy::mma) {
    s += fmt::format(", split_k {}, few_split_k {}, unroll {}, stage {}, warp_tiles {}", t.split_k, t.few_split_k,
                     t.unroll, t.stage, t.warp_tiles);
    if (t.fc2_unroll > 0) s += fmt::format(", fc2_unroll {}", t.fc2_unroll);
    if (t.routed_warp_tiles > 0) s += fmt::format(", routed_warp_tiles {}", t.routed_warp_tiles);
    if (t.routed_row_tiles > 0) s += fmt::format(", routed_row_tiles {}", t.routed_row_tiles);
    if (t.routed_row_loop > 0) s += fmt::format(", routed_row_loop {}", t.routed_row_loop);
    if (t.routed_fc2 > 0) s += fmt::format(", routed_fc2 {}", t.routed_fc2);
    if (t.token_fc2_warp_tiles > 0) s += fmt::format(", token_fc2_warp_tiles {}", t.token_fc2_warp_tiles);
    if (t.route_logits > 0) s += fmt::format(", route_logits {}", t.route_logits);
  }
  return s;
}

}  // namespace

const char* to_string(MoeStrategy s) {
  switch (s) {
    case MoeStrategy::grouped: return "grouped";
    case MoeStrategy::decode: return "decode";
    case MoeStrategy::split: return "split";
    case MoeStrategy::mma: return "mma";
  }
  return "?";
}

SplitGeometry split_geometry(const MoeTiles& t, const MoeProblem& p) {
  SplitGeometry g;
  g.lanes1 = std::max(1, split_lanes(p.hidden));  // as the weights were laid out (moe_weights.cpp)
  g.local1 = t.local_i;
  g.rows_per_group = t.tile_m;
  g.lanes2 = std::max(1, split_lanes(p.intermediate));
  g.slots = std::max(1, std::min(p.top_k, t.local_h / g.lanes2));
  g.rows2 = std::max(1, t.local_h / (g.lanes2 * g.slots));
  return g;
}

std::int64_t largest_divisor_within(std::int64_t n, std::int64_t limit) {
  for (std::int64_t d = std::max<std::int64_t>(1, limit); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

MmaGeometry mma_geometry(const MoeTiles& t, const MoeProblem& p, int ks1, int ks2) {
  MmaGeometry g;
  g.nt = std::max(1, t.tile_m / 8);
  g.unroll = t.unroll;
  g.fc2_unroll = t.fc2_unroll > 0 ? t.fc2_unroll : t.unroll;
  // rows: the GEMM's output rows; block_rows: a multiple the work-group's rows must keep (FC1
  // under W4A4 quantizes whole blocks of its outputs), else 16. split_k 0: mma_auto_split_k;
  // `force` > 0: that K split (batch invariance).
  const auto gemm = [&](std::int64_t k, std::int64_t rows, int local, int block_rows, int force) {
    MmaGemm m;
    const int split_k = t.split_k > 0 ? t.split_k : mma_auto_split_k(k, rows, p.top_k);
    m.ks = force > 0 ? force : static_cast<int>(largest_divisor_within(std::max<std::int64_t>(1, k / 64), split_k));
    // The most row tiles up to local / 32 / split_k that divide the rows and keep whole blocks
    // (local_i / local_h count the K-splitting warps; with the automatic split, row tiles only).
    const int want = std::max(1, local / (32 * (t.split_k > 0 ? t.split_k : 1)));
    m.rt = want;
    m.mt = std::max(1, t.warp_tiles);
    while (m.rt > 1 && (rows % m.rows() != 0 || m.rows() % block_rows != 0)) --m.rt;
    if (m.rows() % block_rows != 0) m.rt = want;  // no smaller fit: mma_tiles_refusal names it
    m.kstage = 4;
    while (m.kstage > 1 && m.ks * 8 * g.nt * (32 * m.kstage + 4) * 4 > 16384) m.kstage /= 2;
    m.stage = t.stage != 0 && m.rt > 1;
    return m;
  };
  const int block_rows = p.scheme.w4a16() ? 16 : std::max(16, p.scheme.block_size());
  g.fc1 = gemm(p.hidden, p.intermediate, t.local_i, block_rows, ks1);
  g.fc2 = gemm(p.intermediate, p.hidden, t.local_h, 16, ks2);
  return g;
}

bool mma_few_pairs_chunk(std::int64_t pairs, std::int64_t experts, int tile_m) {
  return pairs * 16 < static_cast<std::int64_t>(tile_m) * 5 * experts;
}

MoeTiles mma_few_pairs_tiles(const MoeTiles& tiles, const MoeProblem& p, bool one_token) {
  MoeTiles t;
  t.tile_m = 8;
  t.split_k = tiles.few_split_k > 0 ? tiles.few_split_k : one_token ? 0 : kMmaFewSplitK;
  t.few_split_k = t.split_k;
  t.unroll = tiles.unroll;
  t.fc2_unroll = tiles.fc2_unroll;
  t.local_i = 32 * (!p.scheme.w4a16() && p.scheme.block_size() > 16 ? 2 : 1) * std::max(1, t.split_k);
  t.local_h = 32 * std::max(1, t.split_k);
  return t;
}

int mma_auto_split_k(std::int64_t k, std::int64_t rows, int top_k) {
  // The smallest divisor of K / 64 that gives one token's top_k tiles 4096 warps (132 SMs × 31),
  // at most 16 and keeping at least 4 chunks of 64 per warp. Measured on an H100 (NVFP4 W4A16,
  // bench/gpu/sweep-mma.sh, split K of both GEMMs alike): mixtral-8x7b T = 1 with 2, 4, 8, 16
  // warps 300, 189, 176, 168 µs; qwen3-30b-a3b T = 1 92, 98, 78, 88 µs.
  // Where no divisor within the cap reaches 4096 warps, the largest within it (K = 2880: 45 chunks,
  // cap 11, so 9, where "the cap if it divides, else 1" gave a 4096 × 2880 linear layer 1).
  const std::int64_t chunks = std::max<std::int64_t>(1, k / 64), warps = rows / 16 * top_k;
  const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(16, chunks / 4));
  for (std::int64_t d = 1; d <= cap; ++d)
    if (chunks % d == 0 && warps * d >= 4096) return static_cast<int>(d);
  return static_cast<int>(largest_divisor_within(chunks, cap));
}

int mma_pair_row_loop(std::int64_t blocks, int top_k, int compute_units) {
  for (const int r : {8, 4, 2})
    if (blocks % r == 0 && 2 * (blocks / r) * top_k >= 3 * static_cast<std::int64_t>(compute_units)) return r;
  return 1;
}

std::vector<int> mma_pair_fc1_row_tiles(const MoeProblem& p, int row_tiles, int split_k, std::size_t max_work_group) {
  std::vector<int> out;
  for (const int rt : {4, 2})
    if (rt > row_tiles && p.intermediate % (16 * rt) == 0 && (16 * rt) % p.scheme.block_size() == 0 &&
        static_cast<std::size_t>(32 * rt * split_k) <= max_work_group)
      out.push_back(rt);
  out.push_back(row_tiles);
  return out;
}

bool mma_routed_token_fc2(std::int64_t pairs, std::int64_t local_experts, std::int64_t intermediate) {
  return 2 * pairs <= local_experts && intermediate <= 24 * 64;
}

int mma_routed_local_tile(std::int64_t hidden, std::int64_t local_experts, std::uint64_t free_local_bytes) {
  if (2 * kMmaRoutedPairs > local_experts) return 0;
  for (int tile = kMmaRoutedLocalTile; tile >= 2; tile /= 2) {
    const std::uint64_t bytes = 2u * static_cast<std::uint64_t>(hidden) * static_cast<std::uint64_t>(tile);
    if (bytes <= kMmaRoutedLocalBytes && bytes <= free_local_bytes) return tile;
  }
  return 0;
}

int mma_routed_local_row_tiles(std::int64_t intermediate, int block_rows, int row_tiles) {
  const int rt = std::max(row_tiles, kMmaRoutedLocalRowTiles);
  return intermediate % (16 * rt) == 0 && (16 * rt) % block_rows == 0 ? rt : row_tiles;
}

bool mma_native(const DeviceInfo& device) { return device.nv_compute_capability >= 80; }

int split_shared_pairs(const SplitGeometry& g, const MoeProblem& p, std::uint64_t local_mem_bytes) {
  // moe_split_fc1's local arrays besides the tokens (part, a_local, the pair set and list).
  const std::uint64_t fixed = 4u * static_cast<std::uint64_t>(2 * g.rows1() * g.lanes1 + g.rows1()) +
                              4u * (kSplitMaxSharedPairs / 32 + 4 + 1) + 64u;
  const std::uint64_t per_pair = 4u * static_cast<std::uint64_t>(p.hidden);
  if (local_mem_bytes <= fixed) return 1;
  return static_cast<int>(std::min<std::uint64_t>(2, (local_mem_bytes - fixed) / per_pair));
}

std::vector<std::string> moe_kernel_strategies() {
  std::vector<std::string> names;
  for (MoeStrategy id : kAll) names.emplace_back(to_string(id));
  return names;
}

std::string MoeSelection::Entry::describe() const {
  return fmt::format("{}: {} [{}]", to_string(id), describe_tiles(id, tiles), origin);
}

bool MoeSelection::uses(MoeStrategy s) const {
  return std::any_of(usable.begin(), usable.end(), [s](const Entry& e) { return e.id == s; });
}

const MoeSelection::Entry& MoeSelection::for_tokens(std::int64_t tokens, int top_k) const {
  const std::int64_t pairs = tokens * top_k;
  // A strategy's entries by increasing max_pairs: the first that serves the call.
  const auto serves = [pairs](const Entry& e) { return pairs <= e.max_pairs; };
  if (forced || usable.size() == 1) {
    for (const Entry& e : usable)
      if (serves(e)) return e;
    return usable.back();
  }
  for (const Entry& e : usable) {
    if (e.id == MoeStrategy::split && pairs <= split_max_pairs && serves(e)) return e;
  }
  for (const Entry& e : usable) {
    if (e.id == MoeStrategy::decode && pairs <= decode_max_pairs && serves(e)) return e;
  }
  for (const Entry& e : usable) {
    if (e.id == MoeStrategy::mma && serves(e)) return e;
  }
  for (const Entry& e : usable) {
    if (e.id == MoeStrategy::split || !serves(e)) continue;
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
                                   const std::string& requested, bool one_tile_set) {
  std::string name = requested;
  const char* source = "MoeConfig::kernel";
  if (name.empty()) {
    if (const char* env = std::getenv("FP4CL_MOE_KERNEL"); env && *env) {
      name = env;
      source = "FP4CL_MOE_KERNEL";
    }
  }
  // The tuning database's values for this layer (host/tuning/moe_tuning.hpp), then FP4CL_MOE_TILES.
  const tuning::MoeShapeKey tuning_key{problem.scheme, problem.hidden, problem.intermediate, problem.local_experts,
                                       problem.top_k};
  const tuning::MoeTuned tuned_db = tuning::moe_tuned(device, tuning_key);
  const std::map<std::string, int>& tuned = tuned_db.overrides;
  const std::map<std::string, int> env_overrides = tile_overrides();
  std::map<std::string, int> overrides = tuned;
  for (const auto& [key, value] : env_overrides) overrides[key] = value;
  MoeSelection sel;
  sel.layout = default_layout(device, float_width);
  apply(overrides, "vec", sel.layout.vec);
  apply(overrides, "group", sel.layout.group);
  if ((sel.layout.vec & (sel.layout.vec - 1)) != 0 || sel.layout.vec > 16 || sel.layout.group % sel.layout.vec != 0)
    fail("FP4CL_MOE_TILES: vec = {} must be 1, 2, 4, 8 or 16 and divide group = {}", sel.layout.vec, sel.layout.group);
  int decode_max_pairs = static_cast<int>(default_decode_max_pairs(device, problem));
  apply(overrides, "decode_max_pairs", decode_max_pairs);
  sel.decode_max_pairs = decode_max_pairs;
  int split_max_pairs = static_cast<int>(default_split_max_pairs(device, problem));
  apply(overrides, "split_max_pairs", split_max_pairs);
  sel.split_max_pairs = split_max_pairs;
  const auto tiles_with = [&](MoeStrategy id, const std::map<std::string, int>& from) {
    MoeTiles t = default_tiles(id, device, sel.layout, problem);
    const std::string prefix = std::string(to_string(id)) + ".";
    apply(from, prefix + "tile_m", t.tile_m);
    apply(from, prefix + "local_i", t.local_i);
    apply(from, prefix + "local_h", t.local_h);
    if (id == MoeStrategy::mma) {
      apply(from, prefix + "split_k", t.split_k);
      apply(from, prefix + "few_split_k", t.few_split_k);
      for (const MmaTileKey& key : kMmaTileKeys)  // tile_m again: the same value
        apply(from, prefix + key.name, t.*key.field);
    }
    if (id != MoeStrategy::mma && t.tile_m != 1 && t.tile_m != 2 && t.tile_m != 4 && t.tile_m != 8)
      fail("FP4CL_MOE_TILES: {}tile_m = {} must be 1, 2, 4 or 8", prefix, t.tile_m);
    return t;
  };
  const auto sets_tiles = [](const std::map<std::string, int>& from, MoeStrategy id) {
    return std::any_of(from.begin(), from.end(), [id](const auto& kv) { return strategy_key(kv.first, id); });
  };
  // Where tiles from `overrides` come from (MoeSelection::Entry::origin).
  const auto origin_of = [&](MoeStrategy id) -> std::string {
    const bool env = sets_tiles(env_overrides, id);
    const auto files = tuned_db.tiles_origin.find(to_string(id));  // found: the database sets its tiles
    if (files == tuned_db.tiles_origin.end()) return env ? "FP4CL_MOE_TILES" : "built-in";
    const std::string db_origin = fmt::format("tuned ({})", files->second);
    return env ? "FP4CL_MOE_TILES over " + db_origin : db_origin;
  };
  // The tiles of a strategy, where they come from, and why it cannot run with them ("" when it
  // can). Tiles from the tuning database that the strategy refuses here (a database edited by
  // hand, or tuned with another version) give way to the built-in ones (and FP4CL_MOE_TILES),
  // with a warning.
  const auto tiles_for = [&](MoeStrategy id, std::string& why, std::string& origin) {
    MoeTiles t = tiles_with(id, overrides);
    origin = origin_of(id);
    why = refusal(id, t, sel.layout, device, problem);
    if (why.empty() || tuned.empty()) return t;
    const MoeTiles builtin = tiles_with(id, env_overrides);
    if (builtin == t || !refusal(id, builtin, sel.layout, device, problem).empty()) return t;
    log::warn("tuning database: the tuned tiles of MoE strategy {} for H = {}, I = {}, E = {}, k = {} ({}) cannot "
              "run on {}: {}; its built-in tiles used",
              to_string(id), problem.hidden, problem.intermediate, problem.local_experts, problem.top_k,
              problem.scheme.name(), device.name, why);
    why.clear();
    origin = sets_tiles(env_overrides, id) ? "FP4CL_MOE_TILES" : "built-in";
    return builtin;
  };
  // grouped's and mma's entries: one a tuned bucket it won, smallest first, with that bucket's
  // tiles (the built-in ones for keys it does not give) and FP4CL_MOE_TILES's values over them,
  // where the layer may take several (one_tile_set); the largest bucket's serve every larger call.
  // Else one entry, `tiles` (for mma the largest bucket's many-pairs tiles and the smallest's
  // few-pairs ones, FP4CL_MOE_TILES's values over them). A bucket whose tiles the strategy refuses
  // leaves its counts to the next (the largest's to `tiles`); neighbours with the same tiles are
  // one entry.
  const auto add = [&](MoeStrategy id, const MoeTiles& tiles, const std::string& origin) {
    const std::vector<tuning::MoeBucket>* buckets = id == MoeStrategy::grouped ? &tuned_db.grouped
                                                    : id == MoeStrategy::mma   ? &tuned_db.mma
                                                                               : nullptr;
    // Each entry with the tuned bucket whose tiles it has (null: `origin`'s tiles).
    std::vector<std::pair<MoeSelection::Entry, const tuning::MoeBucket*>> entries;
    if (buckets && !one_tile_set && buckets->size() > 1) {
      for (std::size_t i = 0; i < buckets->size(); ++i) {
        const tuning::MoeBucket& b = (*buckets)[i];
        const bool last = i + 1 == buckets->size();
        // The bucket's tiles; those it does not give, the built-in ones; FP4CL_MOE_TILES's over both.
        std::map<std::string, int> with;
        for (const auto& [key, value] : overrides)
          if (!strategy_key(key, id)) with[key] = value;
        for (const auto& [key, value] : b.tiles) with[std::string(to_string(id)) + "." + key] = value;
        for (const auto& [key, value] : env_overrides)
          if (strategy_key(key, id)) with[key] = value;
        const MoeTiles t = tiles_with(id, with);
        if (const std::string why = refusal(id, t, sel.layout, device, problem); !why.empty()) {
          log::warn("tuning database: the tiles of MoE strategy {}'s bucket {} cannot run on {}: {}; {} serve its "
                    "counts",
                    to_string(id), b.tokens, device.name, why,
                    last ? "the layer's one set of tiles" : "the next bucket's");
          if (last) entries.push_back({{id, tiles, std::numeric_limits<std::int64_t>::max(), origin}, nullptr});
          continue;
        }
        entries.push_back(
            {{id, t, last ? std::numeric_limits<std::int64_t>::max() : b.last_tokens * problem.top_k}, &b});
      }
    } else {
      entries.push_back({{id, tiles, std::numeric_limits<std::int64_t>::max(), origin}, nullptr});
    }
    // Neighbours with the same tiles are one entry: "tuned buckets 1, 8 (FILE)" (buckets of
    // another file named after it; "FP4CL_MOE_TILES over tuned bucket 8 (FILE)" where the variable
    // sets some of the strategy's keys).
    const bool env_sets = sets_tiles(env_overrides, id);
    std::vector<MoeSelection::Entry> merged;
    std::vector<const tuning::MoeBucket*> group;  // the tuned buckets of merged.back()
    const auto close = [&] {
      std::string text;
      for (std::size_t i = 0; i < group.size();) {
        std::vector<std::int64_t> tokens;
        std::size_t j = i;
        for (; j < group.size() && group[j]->origin == group[i]->origin; ++j) tokens.push_back(group[j]->tokens);
        text += fmt::format("{}tuned bucket{} {} ({})", text.empty() ? "" : ", ", tokens.size() > 1 ? "s" : "",
                            fmt::join(tokens, ", "), group[i]->origin);
        i = j;
      }
      if (!text.empty()) merged.back().origin = (env_sets ? "FP4CL_MOE_TILES over " : "") + text;
    };
    for (const auto& [e, bucket] : entries) {
      if (!merged.empty() && merged.back().tiles == e.tiles && group.empty() == (bucket == nullptr)) {
        merged.back().max_pairs = e.max_pairs;
        if (bucket) group.push_back(bucket);
      } else {
        close();
        merged.push_back(e);
        group.clear();
        if (bucket) group.push_back(bucket);
      }
    }
    close();
    for (const MoeSelection::Entry& e : merged) {
      if (merged.size() > 1)
        log::debug("MoE: strategy {} takes {} for calls of {}", to_string(id), e.describe(),
                   &e == &merged.back() ? std::string("more pairs")
                                        : fmt::format("up to {} pairs", e.max_pairs));
      sel.usable.push_back(e);
    }
  };
  if (!name.empty()) {
    bool known = false;
    for (MoeStrategy id : kAll) {
      if (name != to_string(id)) continue;
      known = true;
      std::string why, origin;
      const MoeTiles tiles = tiles_for(id, why, origin);
      if (!why.empty()) fail("MoE kernel strategy '{}' ({}) cannot run on {}: {}", name, source, device.name, why);
      add(id, tiles, origin);
      sel.forced = true;
    }
    if (!known) fail("unknown MoE kernel strategy '{}' ({}); valid: {}", name, source, valid_names());
    log::info("MoE: strategy {} forced by {}", name, source);
    return sel;
  }
  std::string reasons;
  for (MoeStrategy id : kAll) {
    if (id == MoeStrategy::split && sel.split_max_pairs == 0) continue;  // CPUs: only when forced or asked for
    if (id == MoeStrategy::mma && !mma_native(device)) continue;        // emulated: only when forced
    std::string why, origin;
    const MoeTiles tiles = tiles_for(id, why, origin);
    if (why.empty()) {
      add(id, tiles, origin);
      log::debug("MoE: strategy {} usable (MOE_VEC={} MOE_GROUP={} MOE_TILE_M={}, local sizes {} and {})",
                 to_string(id), sel.layout.vec, sel.layout.group, tiles.tile_m, tiles.local_i, tiles.local_h);
    } else {
      log::info("MoE: strategy {} refused on {}: {}", to_string(id), device.name, why);
      reasons += fmt::format("\n  {}: {}", to_string(id), why);
    }
  }
  if (sel.usable.empty()) fail("no MoE kernel strategy can run {} on {}:{}", problem.scheme.name(), device.name, reasons);
  // With tensor cores, mma serves every chunk (split is not built, so the layer holds one weight
  // layout fewer) unless the tuning database or FP4CL_MOE_TILES sets split's crossover. Measured
  // on an H100 (µs, split / mma, both forced, one token routed in mma's FC1 with no sort):
  // mixtral-8x7b T = 1 W4A16 166 / 106, W4A4 198 / 136; qwen3-30b-a3b T = 1 W4A16 32 / 28-35,
  // W4A4 34-36 / 33; T = 8 W4A16 124 / 104-110 (and 3x at mixtral T = 8, 4x at qwen3 T = 64).
  const bool mma = std::any_of(sel.usable.begin(), sel.usable.end(),
                               [](const MoeSelection::Entry& e) { return e.id == MoeStrategy::mma; });
  if (mma && overrides.find("split_max_pairs") == overrides.end()) {
    sel.split_max_pairs = 0;
    sel.usable.erase(std::remove_if(sel.usable.begin(), sel.usable.end(),
                                    [](const MoeSelection::Entry& e) { return e.id == MoeStrategy::split; }),
                     sel.usable.end());
  }
  // ... and mma replaces decode (2.4-6x faster at every T measured: bench/gpu/results-h100.md)
  // unless a tuning-database entry or FP4CL_MOE_TILES sets decode's crossover. grouped never
  // serves a call beside mma (for_tokens takes mma first). Neither is built where it serves
  // nothing: their programs would be compiled and their weight layout (the interleaved rows, as
  // many bytes as mma's) prepared and uploaded for no call.
  if (mma) {
    if (overrides.find("decode_max_pairs") == overrides.end()) sel.decode_max_pairs = 0;
    const bool decode = sel.decode_max_pairs > 0;
    sel.usable.erase(std::remove_if(sel.usable.begin(), sel.usable.end(),
                                    [decode](const MoeSelection::Entry& e) {
                                      return e.id == MoeStrategy::grouped || (e.id == MoeStrategy::decode && !decode);
                                    }),
                     sel.usable.end());
  }
  return sel;
}

}  // namespace fp4cl
