// The MoE tuner's search for the mma strategy (bench/tune_moe.cpp, tune_moe_candidates.hpp):
// which parameters it searches at buckets of few and of many pairs, which strategies it tunes on
// a device, that candidates the layer refuses are named and skipped without counting against the
// budget, a tuning run whose entries, written and read back as a database, reach the layer
// (emulated MMAs on PoCL: tiny shapes, one timed call per candidate, at most two candidates per
// bucket), the database's entry of a bucket timed beside the search, and another device's buckets
// that a run does not tune named (tune_incumbent.hpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"
#include "kernels/moe_registry.hpp"
#include "support/described_devices.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "tune_incumbent.hpp"
#include "tune_moe_candidates.hpp"
#include "tune_targets.hpp"
#include "tuning/moe_tuning.hpp"
#include "tuning/tuning_store.hpp"
#include "synthetic_data.hpp"
#include "tuning_search.hpp"

namespace fp4cl::bench {
namespace {

const QuantScheme kW4A16{WeightFormat::nvfp4, Activations::bf16};

std::map<std::string, std::vector<long long>> as_map(const std::vector<ParamAxis>& axes) {
  std::map<std::string, std::vector<long long>> m;
  for (const ParamAxis& a : axes) m[a.name] = a.values;
  return m;
}

TEST(TuneMoeAxes, MmaSearchesItsFewPairsParametersAtFewPairsAndItsTilesAtMany) {
  using Axes = std::map<std::string, std::vector<long long>>;
  for (DeviceKind kind : {DeviceKind::gpu, DeviceKind::cpu}) {
    for (bool with_layout : {true, false}) {  // mma has its own weight layout: never vec or group
      EXPECT_EQ(as_map(moe_axes("mma", with_layout, true, kind)),
                (Axes{{"few_split_k", {0, 1, 2, 4, 8}}, {"unroll", {1, 2, 4, 8}}, {"fc2_unroll", {1, 2, 4, 8}}}));
      EXPECT_EQ(as_map(moe_axes("mma", with_layout, true, kind, true)),
                (Axes{{"few_split_k", {0, 1, 2, 4, 8}},
                      {"unroll", {1, 2, 4, 8}},
                      {"fc2_unroll", {1, 2, 4, 8}},
                      {"routed_row_tiles", {0, 1, 2, 4}},
                      {"routed_row_loop", {0, 2, 4}},
                      {"token_fc2_warp_tiles", {0, 2, 4}}}));
      Axes w4a4 = as_map(moe_axes("mma", with_layout, true, kind, true));
      w4a4["routed_warp_tiles"] = {0, 2, 4};  // W4A4: the routed FC1's row tiles a warp as well
      EXPECT_EQ(as_map(moe_axes("mma", with_layout, true, kind, true, true)), w4a4);
      EXPECT_EQ(as_map(moe_axes("mma", with_layout, false, kind)),
                (Axes{{"tile_m", {8, 16, 32, 64}},
                      {"local_i", {32, 64, 128, 256}},
                      {"local_h", {32, 64, 128, 256}},
                      {"split_k", {0, 1, 2, 4}},
                      {"stage", {0, 1}},
                      {"warp_tiles", {1, 2, 4}}}));
    }
  }
  // The other strategies keep their axes: decode has no tile_m, the layout at the first bucket.
  const auto decode = as_map(moe_axes("decode", true, true, DeviceKind::cpu));
  EXPECT_EQ(decode.count("tile_m"), 0u);
  EXPECT_EQ(decode.count("vec"), 1u);
  const auto grouped = as_map(moe_axes("grouped", false, false, DeviceKind::gpu));
  EXPECT_EQ(grouped.at("tile_m"), (std::vector<long long>{2, 4, 8}));
  EXPECT_EQ(grouped.count("vec"), 0u);
}

// Routed buckets: 2 to 64 pairs of a few-pairs bucket (qwen3-30b-a3b's T = 2 .. 8; one token
// runs per pair).
TEST(TuneMoeAxes, RoutedBucketsAreFewPairsOfSeveralTokensUpTo64Pairs) {
  for (std::int64_t t : {2, 4, 8}) EXPECT_TRUE(mma_routed_bucket(t, 8, true)) << t;
  EXPECT_FALSE(mma_routed_bucket(1, 8, true));
  EXPECT_FALSE(mma_routed_bucket(9, 8, true));
  EXPECT_FALSE(mma_routed_bucket(8, 8, false));
  EXPECT_TRUE(mma_routed_bucket(32, 2, true));  // mixtral-8x7b: 64 pairs
}

TEST(TuneMoeAxes, FewPairsBucketsAreThoseBelowFiveSixteenthsOfATilePerExpert) {
  // qwen3-30b-a3b (E = 128, k = 8), built-in tile_m 32: below 10 pairs per expert = 160 tokens.
  for (std::int64_t t : {1, 8, 64, 128, 159}) EXPECT_TRUE(mma_few_pairs_bucket(t, 8, 128, 32)) << t;
  for (std::int64_t t : {160, 192, 256, 512}) EXPECT_FALSE(mma_few_pairs_bucket(t, 8, 128, 32)) << t;
  // mixtral-8x7b (E = 8, k = 2): below 40 tokens; gpt-oss-20b (E = 32, k = 4): below 80.
  EXPECT_TRUE(mma_few_pairs_bucket(32, 2, 8, 32));
  EXPECT_FALSE(mma_few_pairs_bucket(40, 2, 8, 32));
  EXPECT_TRUE(mma_few_pairs_bucket(79, 4, 32, 32));
  EXPECT_FALSE(mma_few_pairs_bucket(80, 4, 32, 32));
  // tile_m moves the line: 64 pairs over 4 experts are many for tiles of 16 (5 an expert), few
  // for 64 (20); the layer agrees.
  EXPECT_FALSE(mma_few_pairs_bucket(32, 2, 4, 16));
  EXPECT_TRUE(mma_few_pairs_bucket(32, 2, 4, 64));
  EXPECT_EQ(mma_few_pairs_bucket(32, 2, 4, 32), mma_few_pairs_chunk(64, 4, 32));
}

DeviceInfo fake_h100() {
  DeviceInfo d;
  d.name = "fake H100";
  d.kind = DeviceKind::gpu;
  d.max_work_group_size = 1024;
  d.local_mem_bytes = 48 * 1024;
  d.nv_compute_capability = 90;
  return d;
}

TEST(TuneMoeStrategies, TheOnesAutomaticSelectionCanChooseUnlessNamed) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const MoeProblem qwen{kW4A16, 2048, 768, 128, 8};
  // NVIDIA with tensor cores: mma replaces grouped; split and decode may still win small buckets.
  EXPECT_EQ(moe_tune_strategies(fake_h100(), 1, qwen, {}), (std::vector<std::string>{"decode", "split", "mma"}));
  // A shape mma refuses (H not a multiple of 64): grouped instead.
  const MoeProblem odd{kW4A16, 96, 64, 8, 2};
  EXPECT_EQ(moe_tune_strategies(fake_h100(), 1, odd, {}), (std::vector<std::string>{"grouped", "decode", "split"}));
  DeviceInfo other_gpu = fake_h100();
  other_gpu.nv_compute_capability = 0;
  EXPECT_EQ(moe_tune_strategies(other_gpu, 1, qwen, {}), (std::vector<std::string>{"grouped", "decode", "split"}));
  DeviceInfo cpu = other_gpu;
  cpu.kind = DeviceKind::cpu;
  EXPECT_EQ(moe_tune_strategies(cpu, 16, qwen, {}), (std::vector<std::string>{"grouped", "decode"}));
  // Named: exactly those (mma forced even where it is emulated), duplicates once.
  EXPECT_EQ(moe_tune_strategies(cpu, 16, qwen, {"mma", "decode", "mma"}), (std::vector<std::string>{"mma", "decode"}));
  try {
    moe_tune_strategies(cpu, 16, qwen, {"tensor"});
    ADD_FAILURE() << "an unknown strategy was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown MoE strategy 'tensor'; valid: grouped, decode, split, mma"),
              std::string::npos)
        << e.what();
  }
}

TEST(TuneMoeCandidates, RefusedMmaCandidatesAreNamedWithoutABuild) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const MoeProblem tiny{kW4A16, 128, 64, 4, 2};
  const DeviceInfo d = fake_h100();
  tuning::Params p = moe_default_params(d, 1, tiny, "mma");
  EXPECT_EQ(p, (tuning::Params{{"vec", 1}, {"group", 64}, {"tile_m", 32}, {"local_i", 32}, {"local_h", 32},
                               {"split_k", 1}, {"few_split_k", 0}, {"unroll", 8}, {"stage", 0},
                               {"warp_tiles", 1}}));  // W4A16: 8 ahead
  // NVFP4 W4A16 loads 8 chunks ahead, W4A4 and MXFP4 4 (8 measured slower there on the H100).
  const MoeProblem tiny_w4a4{QuantScheme{WeightFormat::nvfp4, Activations::fp4_dynamic}, 128, 64, 4, 2};
  EXPECT_EQ(moe_default_params(d, 1, tiny_w4a4, "mma").at("unroll"), 4);
  const MoeProblem tiny_mxfp4{QuantScheme{WeightFormat::mxfp4, Activations::bf16}, 128, 64, 4, 2};
  EXPECT_EQ(moe_default_params(d, 1, tiny_mxfp4, "mma").at("unroll"), 4);
  EXPECT_EQ(moe_tiles_env("mma", {{"vec", 1}, {"few_split_k", 0}, {"tile_m", 16}}), "mma.few_split_k=0,mma.tile_m=16,vec=1");
  EXPECT_EQ(moe_candidate_refusal(d, 1, tiny, "mma", p), "");
  // Every many-pairs candidate of the search: those the layer refuses say why; the rest build.
  int refused_split = 0, refused_local = 0, accepted = 0;
  for (long long tile_m : {8, 16, 32, 64})
    for (long long li : {64, 128, 256})
      for (long long lh : {64, 128, 256})
        for (long long sk : {0, 1, 2, 4}) {
          tuning::Params c = p;
          c["tile_m"] = tile_m;
          c["local_i"] = li;
          c["local_h"] = lh;
          c["split_k"] = sk;
          const std::string why = moe_candidate_refusal(d, 1, tiny, "mma", c);
          if (why.empty()) {
            ++accepted;
            continue;
          }
          const std::string what = fmt::format("tile_m={} local_i={} local_h={} split_k={}: {}", tile_m, li, lh, sk, why);
          if (sk == 4 && (li == 64 || lh == 64)) {
            ++refused_split;  // the K split over 4 warps needs work-groups of 128
            EXPECT_NE(why.find("must be multiples of 32 · split_k = 128"), std::string::npos) << what;
          } else {
            // Tiles of 64 pairs, 4 row tiles of FC1 with K split over 2 warps: their partial sums
            // (2 · 4 · 2 matrices · 8 MMAs · 128 floats) overflow 48 KiB.
            ++refused_local;
            EXPECT_TRUE(tile_m == 64 && li == 256 && sk == 2) << what;
            EXPECT_NE(why.find("FC1 needs 65536 bytes of local memory, the device has 49152"), std::string::npos)
                << what;
          }
        }
  EXPECT_EQ(refused_split, 4 * 5);  // local_i or local_h 64: 5 of the 9 pairs, at every tile_m
  EXPECT_EQ(refused_local, 3);
  EXPECT_EQ(accepted, 4 * 3 * 3 * 4 - 23);
  tuning::Params bad = p;
  bad["unroll"] = 3;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("unroll = 3 must be 1, 2, 4 or 8"), std::string::npos);
  bad = p;
  bad["stage"] = 2;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("stage = 2 must be 0 (each warp reads the activations) or 1"),
            std::string::npos);
  bad = p;
  bad["stage"] = 1;
  EXPECT_EQ(moe_candidate_refusal(d, 1, tiny, "mma", bad), "");
  bad = p;
  bad["warp_tiles"] = 3;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("warp_tiles = 3 must be 1, 2 or 4"), std::string::npos);
  bad["warp_tiles"] = 4;  // 64 rows a work-group divide I = 64 and H = 128
  EXPECT_EQ(moe_candidate_refusal(d, 1, tiny, "mma", bad), "");
  bad = p;
  bad["tile_m"] = 24;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("tile_m = 24 must be 8, 16, 32 or 64"),
            std::string::npos);
  // FP4CL_MOE_TILES takes 0 for the K splits (automatic; p's few_split_k above), nothing below.
  bad = p;
  bad["split_k"] = -1;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("'mma.split_k=-1' is not key=non-negative integer"),
            std::string::npos);
  bad = p;
  bad["unroll"] = 0;
  EXPECT_NE(moe_candidate_refusal(d, 1, tiny, "mma", bad).find("'mma.unroll=0' is not key=positive integer"),
            std::string::npos);
  // The layer's FP4CL_MOE_TILES is the caller's again afterwards.
  EXPECT_EQ(std::getenv("FP4CL_MOE_TILES"), nullptr);
}

TEST(TuneSearch, RefusedCandidatesAreSkippedAndNotCountedAgainstTheBudget) {
  // a = 2 and 3 refused; time = 10 - b (the larger b the faster); budget of 3 measured.
  int evaluated = 0;
  const Evaluate evaluate = [&](const tuning::Params& p) {
    Trial t;
    if (p.at("a") != 1) {
      t.refused = true;
      t.note = "refused: a must be 1";
      return t;
    }
    ++evaluated;
    t.ok = true;
    t.us = 10.0 - static_cast<double>(p.at("b"));
    return t;
  };
  const std::vector<ParamAxis> axes = {{"a", {1, 2, 3}}, {"b", {1, 2, 3, 4, 5}}};
  const SearchResult r = coordinate_descent({{"a", 1}, {"b", 1}}, axes, evaluate, 2, 3);
  // Measured: b = 1 (start), 2, 3; then the budget stops the search; the winner and the start
  // are timed again to confirm.
  EXPECT_EQ(r.best.params, (tuning::Params{{"a", 1}, {"b", 3}}));
  EXPECT_EQ(evaluated, 3 + 2);
  int refused = 0;
  for (const Trial& t : r.trials) refused += t.refused ? 1 : 0;
  EXPECT_EQ(refused, 2);
  // No budget: every value of b.
  evaluated = 0;
  const SearchResult all = coordinate_descent({{"a", 1}, {"b", 1}}, axes, evaluate, 2, 0);
  EXPECT_EQ(all.best.params, (tuning::Params{{"a", 1}, {"b", 5}}));
}

// A tuning run of the mma strategy on the test device (emulated off NVIDIA), its entries written
// as a database and read back: the layer forced to mma builds its kernels with them.
TEST(TuneMoeMma, EntriesRoundTripThroughTheDatabaseToTheBuildOptions) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const test::ScopedEnv kernel("FP4CL_MOE_KERNEL", std::nullopt);
  std::optional<test::ScopedEnv> file;
  file.emplace("FP4CL_TUNING_FILE", std::string("none"));
  tuning::reload_tuning_store();
  Context ctx = Context::create();
  const MoeTuneShape shape{128, 64, 4, 2};
  TuneSettings settings;
  settings.buckets = {32, 1};  // 1: few pairs (2 < 16 · 4), 32: many (64)
  settings.iters = 1;
  settings.warmup = 0;
  settings.warmup_ms = 0;
  settings.max_passes = 1;
  settings.max_candidates = 2;
  settings.moe_kernels = {"mma"};
  std::vector<std::string> lines;
  settings.log = [&](const std::string& line) { lines.push_back(line); };
  const std::vector<tuning::Entry> entries = tune_moe(ctx, kW4A16, shape, settings);
  ASSERT_EQ(entries.size(), 2u);
  const tuning::Entry& few = entries[0];
  const tuning::Entry& many = entries[1];
  EXPECT_EQ(few.tokens, 1);
  EXPECT_EQ(many.tokens, 32);
  for (const tuning::Entry& e : entries) {
    EXPECT_EQ(e.kernel, "mma");
    EXPECT_EQ(e.op, "moe");
    EXPECT_EQ(e.scheme, "nvfp4-w4a16");
    for (const char* key : {"vec", "group", "tile_m", "local_i", "local_h", "split_k", "few_split_k", "unroll", "stage"})
      EXPECT_EQ(e.params.count(key), 1u) << key;
    EXPECT_GT(e.measured.us, 0.0);
  }
  // The few-pairs bucket searched few_split_k (with a budget of 2: the start's 0 and 1) and kept
  // the built-in tiles of many pairs, FC2's chunks ahead written as FC1's (the start: explicit, so
  // that the unroll axis moves FC1 alone); the many-pairs bucket held its few_split_k, unroll and
  // fc2_unroll and searched tile_m (the start's 32 and 8).
  EXPECT_LE(few.params.at("few_split_k"), 1);
  EXPECT_EQ(few.params.at("unroll"), ctx.info().kind == DeviceKind::cpu ? 1 : 8);  // the built-in (W4A16)
  EXPECT_EQ(few.params.at("fc2_unroll"), few.params.at("unroll"));
  EXPECT_EQ(few.params.at("tile_m"), 32);
  EXPECT_EQ(few.params.at("local_i"), 32);
  EXPECT_EQ(many.params.at("few_split_k"), few.params.at("few_split_k"));
  EXPECT_EQ(many.params.at("unroll"), few.params.at("unroll"));
  EXPECT_EQ(many.params.at("fc2_unroll"), few.params.at("fc2_unroll"));
  EXPECT_TRUE(many.params.at("tile_m") == 8 || many.params.at("tile_m") == 32) << many.params.at("tile_m");
  EXPECT_EQ(many.params.at("local_i"), 32);
  bool searched_few = false, searched_many = false;
  for (const std::string& l : lines) {
    searched_few |= l.find("T=1: mma") != std::string::npos;
    searched_many |= l.find("T=32: mma") != std::string::npos;
  }
  EXPECT_TRUE(searched_few && searched_many);

  // Written and read back.
  test::TempDir dir;
  const std::string path = dir.str() + "/tuning.json";
  tuning::Database db;
  for (const tuning::Entry& e : entries) db.put(tuning::DeviceIdentity::of(ctx.info()), e);
  std::ofstream(path, std::ios::binary) << tuning::to_json_text(db);
  file.reset();
  file.emplace("FP4CL_TUNING_FILE", path);
  tuning::reload_tuning_store();
  const std::map<std::string, int> o = tuning::moe_tuned(ctx.info(), {kW4A16, 128, 64, 4, 2}).overrides;
  EXPECT_EQ(o.at("mma.tile_m"), many.params.at("tile_m"));
  EXPECT_EQ(o.at("mma.local_i"), many.params.at("local_i"));
  EXPECT_EQ(o.at("mma.local_h"), many.params.at("local_h"));
  EXPECT_EQ(o.at("mma.split_k"), many.params.at("split_k"));
  EXPECT_EQ(o.at("mma.stage"), many.params.at("stage"));
  EXPECT_EQ(o.at("mma.few_split_k"), few.params.at("few_split_k"));
  EXPECT_EQ(o.at("mma.unroll"), few.params.at("unroll"));
  EXPECT_EQ(o.at("decode_max_pairs"), 0);

  // The layer forced to mma builds its kernels with them (the program cache's debug lines).
  const MoeTiles tiles_many{static_cast<int>(many.params.at("tile_m")), static_cast<int>(many.params.at("local_i")),
                            static_cast<int>(many.params.at("local_h")), static_cast<int>(many.params.at("split_k")),
                            static_cast<int>(few.params.at("few_split_k")), static_cast<int>(few.params.at("unroll")),
                            0,  // row_loop: automatic
                            static_cast<int>(many.params.at("stage"))};
  const MoeProblem problem{kW4A16, 128, 64, 4, 2};
  const MmaGeometry g_many = mma_geometry(tiles_many, problem);
  const MmaGeometry g_few = mma_geometry(mma_few_pairs_tiles(tiles_many, problem), problem);
  test::LogCapture log;
  MoeConfig cfg;
  cfg.scheme = kW4A16;
  cfg.top_k = 2;
  cfg.max_tokens = 32;
  cfg.kernel = "mma";
  MoeLayer layer = MoeLayer::create(ctx, make_experts(kW4A16.weight, 128, 64, 4, 1), cfg);
  EXPECT_EQ(layer.tile_pairs_for(32), mma_few_pairs_bucket(32, 2, 4, tiles_many.tile_m) ? 8 : tiles_many.tile_m);
  const auto expect_program = [&](const std::string& gemm, const MmaGeometry& g, const MmaGemm& m, bool few_pairs) {
    const std::string want = fmt::format("-DMMA_KSPLIT={} -DMMA_KSTAGE={} -DMMA_NT={} -DMMA_RT={} -DMMA_STAGE={}",
                                         m.ks, m.kstage, g.nt, m.rt, m.stage ? 1 : 0);
    bool found = false;
    for (const std::string& line : log.at(log::Level::debug)) {
      if (line.find("program moe_mma.cl") == std::string::npos || line.find("-D" + gemm + "=") == std::string::npos ||
          line.find("MMA_PER_PAIR") != std::string::npos)
        continue;
      if (gemm == "MMA_FC2" && line.find(few_pairs ? "-DMMA_SUM=1" : "-DMMA_SUM=0") == std::string::npos) continue;
      found |= line.find(want) != std::string::npos &&
               line.find(fmt::format("-DMMA_UNROLL={}", g.unroll)) != std::string::npos;
    }
    EXPECT_TRUE(found) << gemm << (few_pairs ? " (few pairs)" : "") << ": no program with " << want;
  };
  expect_program("MMA_FC1", g_many, g_many.fc1, false);
  expect_program("MMA_FC2", g_many, g_many.fc2, false);
  expect_program("MMA_FC1", g_few, g_few.fc1, true);
  expect_program("MMA_FC2", g_few, g_few.fc2, true);
  file.reset();
  tuning::reload_tuning_store();
}

}  // namespace
}  // namespace fp4cl::bench

namespace fp4cl::bench {

// The entry the databases give a bucket before tuning is timed beside the search and competes
// with its best: one mma entry whose few-pairs K split (1) the search, held to its start (0), does
// not reach; an entry of a strategy not tuned here, and one the layer refuses, are named and not
// timed. The databases are given as a store, as `fp4cl-bench tune` keeps the one it found.
TEST(TuneMoe, TheDatabaseEntryOfABucketIsTimedBesideTheSearch) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const test::ScopedEnv kernel("FP4CL_MOE_KERNEL", std::nullopt);
  const test::ScopedEnv file("FP4CL_TUNING_FILE", std::string("none"));
  tuning::reload_tuning_store();
  Context ctx = Context::create();
  const MoeTuneShape shape{128, 64, 4, 2};
  const MoeProblem problem{kW4A16, 128, 64, 4, 2};
  cl_uint width = 1;
  ctx.device().getInfo(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &width);
  const tuning::Params start = moe_default_params(ctx.info(), width, problem, "mma");
  const auto store_with = [&](const std::string& strategy, tuning::Params params) {
    tuning::Entry e;
    e.op = "moe";
    e.kernel = strategy;
    e.scheme = "nvfp4-w4a16";
    e.shape = {{"hidden", 128}, {"inter", 64}, {"experts", 4}, {"topk", 2}};
    e.tokens = 1;
    e.params = std::move(params);
    tuning::Database db;
    db.put(tuning::DeviceIdentity::of(ctx.info()), e);
    return std::make_shared<const tuning::TuningStore>(
        std::vector<tuning::DatabaseSource>{{"before.json", tuning::to_json_text(db)}});
  };
  const auto tune = [&](std::shared_ptr<const tuning::TuningStore> database, std::vector<std::string>& lines) {
    TuneSettings settings;
    settings.buckets = {1};
    settings.iters = 1;
    settings.warmup = 0;
    settings.warmup_ms = 0;
    settings.max_passes = 1;
    settings.max_candidates = 1;  // the search times its start alone
    settings.moe_kernels = {"mma"};
    settings.log = [&](const std::string& line) { lines.push_back(line); };
    settings.database = std::move(database);
    const std::vector<tuning::Entry> entries = tune_moe(ctx, kW4A16, shape, settings);
    EXPECT_EQ(entries.size(), 1u);
    return entries.empty() ? tuning::Entry{} : entries[0];
  };
  const auto line_with = [](const std::vector<std::string>& lines, const std::string& text) {
    for (const std::string& l : lines)
      if (l.find(text) != std::string::npos) return l;
    return std::string();
  };

  tuning::Params other = start;
  other["few_split_k"] = 1;
  other["fc2_unroll"] = other.at("unroll");
  {
    std::vector<std::string> lines;
    const tuning::Entry best = tune(store_with("mma", other), lines);
    const std::string summary = line_with(lines, "T=1: mma");
    EXPECT_NE(summary.find("; database entry (bucket 1 of before.json: mma "), std::string::npos) << summary;
    // The start and the entry, then each twice again side by side.
    EXPECT_NE(summary.find(" us; 6 trials"), std::string::npos) << summary;
    // Two finalists, the search's and the database's, timed again side by side; either may win.
    EXPECT_NE(line_with(lines, "timed again side by side"), "");
    EXPECT_TRUE(best.params.at("few_split_k") == 0 || best.params == other) << params_text(best.params);
  }
  {
    std::vector<std::string> lines;
    const tuning::Entry best = tune(store_with("grouped", {{"vec", 1}, {"group", 64}}), lines);
    EXPECT_NE(line_with(lines, "T=1: mma").find("not timed: its strategy grouped is not tuned here"),
              std::string::npos);
    EXPECT_EQ(line_with(lines, "timed again side by side"), "");
    EXPECT_EQ(best.params.at("few_split_k"), 0);
  }
  {
    std::vector<std::string> lines;
    tuning::Params refused = start;
    refused["split_k"] = 3;  // work-groups of 32 · 3 do not divide the layer's
    const tuning::Entry best = tune(store_with("mma", refused), lines);
    EXPECT_NE(line_with(lines, "T=1: mma").find(") not timed: refused: "), std::string::npos)
        << line_with(lines, "T=1: mma");
    EXPECT_EQ(best.params.at("split_k"), start.at("split_k"));
  }
  // No database: the line says nothing of one.
  {
    std::vector<std::string> lines;
    tune(nullptr, lines);
    EXPECT_EQ(line_with(lines, "T=1: mma").find("database entry"), std::string::npos);
  }
}

}  // namespace fp4cl::bench

namespace fp4cl::bench {

// Buckets a key takes from another device's entries (a similar device's, another driver's) that a
// run does not tune are named before it replaces them; the device's own entries, and another
// device's whose buckets are all tuned, give no note.
TEST(TuneMoe, AnotherDevicesBucketsThatARunDoesNotTuneAreNamed) {
  const DeviceInfo h200 = test::described_h200();
  DeviceInfo h100 = h200;
  h100.name = "NVIDIA H100 80GB HBM3";
  DeviceInfo newer_driver = h200;
  newer_driver.driver_version = "590.1";
  const tuning::LookupKey key = tuning::moe_lookup_key({kW4A16, 2048, 768, 128, 8});
  tuning::Database db;
  for (const std::int64_t bucket : {1, 4, 6, 8}) {
    tuning::Entry e;
    e.op = "moe";
    e.kernel = "mma";
    e.scheme = "nvfp4-w4a16";
    e.shape = key.shape;
    e.tokens = bucket;
    e.params = {{"vec", 1}, {"group", 64}};
    db.put(tuning::DeviceIdentity::of(h200), e);
  }
  const tuning::TuningStore store({{"h200.json", tuning::to_json_text(db)}});
  const std::string note = untuned_buckets_note(&store, h100, key, {1, 8, 64});
  EXPECT_NE(note.find("has buckets 4, 6 from h200.json (tuned on a similar device: NVIDIA H200"), std::string::npos)
      << note;
  EXPECT_NE(note.find("add them to --tokens"), std::string::npos) << note;
  const std::string other_driver = untuned_buckets_note(&store, newer_driver, key, {1, 8});
  EXPECT_NE(other_driver.find("buckets 4, 6 from h200.json (tuned with driver"), std::string::npos) << other_driver;
  EXPECT_EQ(untuned_buckets_note(&store, h200, key, {1, 8}), "");        // its own
  EXPECT_EQ(untuned_buckets_note(&store, h100, key, {1, 4, 6, 8}), "");  // all tuned
  EXPECT_EQ(untuned_buckets_note(nullptr, h100, key, {1}), "");
}

}  // namespace fp4cl::bench
