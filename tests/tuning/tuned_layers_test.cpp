// The tuning database at work: tuned parameters reach the linear kernels' build options (the
// layer's kernel description shows them), the MoE strategy selection and the mma strategy's
// build options (the program cache's debug line shows them); explicit options win; a missing
// shape, a corrupt file, an invalid value or an entry a kernel refuses fall back to the built-in
// defaults, with a log line saying so.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "kernels/moe_registry.hpp"
#include "layers/linear_plan.hpp"
#include "linear/linear_check.hpp"
#include "moe/moe_test_support.hpp"
#include "support/described_devices.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "tuning/embedded_tuning.hpp"
#include "tuning/tuning_defaults.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl {
namespace {

Context& context() {
  static Context ctx = Context::create();
  return ctx;
}

constexpr std::int64_t kN = 72, kK = 256;  // a shape no shipped database holds
const QuantScheme kScheme{WeightFormat::nvfp4, Activations::bf16};

tuning::Entry linear_entry(std::int64_t tokens, const std::string& kernel, tuning::Params params) {
  tuning::Entry e;
  e.op = "linear";
  e.scheme = tuning::scheme_key(kScheme);
  e.shape = {{"n", kN}, {"k", kK}};
  e.tokens = tokens;
  e.kernel = kernel;
  e.params = std::move(params);
  return e;
}

// Each test points FP4CL_TUNING_FILE at its own database and reloads the process's store; the
// store is reloaded from the unchanged environment afterwards.
// The shipped databases alone: no FP4CL_TUNING_FILE, no user database (XDG_CONFIG_HOME an empty
// folder, `config`), and no FP4CL_MOE_TILES or FP4CL_MOE_KERNEL in the way; the store reloaded.
struct ShippedDatabasesOnly {
  test::ScopedEnv tiles{"FP4CL_MOE_TILES", std::nullopt};
  test::ScopedEnv forced{"FP4CL_MOE_KERNEL", std::nullopt};
  test::TempDir config;
  test::ScopedEnv file{"FP4CL_TUNING_FILE", std::nullopt};
  test::ScopedEnv xdg{"XDG_CONFIG_HOME", config.str()};
  ShippedDatabasesOnly() { tuning::reload_tuning_store(); }
};

class TunedLayers : public testing::Test {
 protected:
  void use_database(const tuning::Database& db) { use_text(tuning::to_json_text(db)); }
  // A database of `entries` for this device.
  void use_entries(const std::vector<tuning::Entry>& entries) {
    tuning::Database db;
    const tuning::DeviceIdentity device = tuning::DeviceIdentity::of(context().info());
    for (const tuning::Entry& e : entries) db.put(device, e);
    use_database(db);
  }
  void use_text(const std::string& text) {
    std::ofstream(path_, std::ios::binary) << text;
    env_.emplace("FP4CL_TUNING_FILE", path_);
    tuning::reload_tuning_store();
  }
  void TearDown() override {
    env_.reset();
    tuning::reload_tuning_store();
  }
  // Every parameter of the 64-token entry is given: the device classes' defaults differ (GPU
  // GEMM_WI_N 1, CPU 2), and the test expects one description on both.
  tuning::Database linear_database() const {
    tuning::Database db;
    const tuning::DeviceIdentity device = tuning::DeviceIdentity::of(context().info());
    db.put(device, linear_entry(1, "gemv_rows", {{"GEMV_TOKENS", 3}, {"GEMV_LOCAL", 3}, {"FP4CL_VEC", 8},
                                                 {"GEMV_DECODE_LUT", 0}}));
    db.put(device, linear_entry(8, "gemv_rows", {{"GEMV_TOKENS", 5}, {"GEMV_LOCAL", 2}}));
    db.put(device, linear_entry(64, "gemm_tiled", {{"GEMM_TILE_M", 16}, {"GEMM_TILE_N", 32}, {"GEMM_TILE_K", 64},
                                                   {"GEMM_WI_M", 2}, {"GEMM_WI_N", 2}, {"FP4CL_VEC", 8}}));
    return db;
  }

  test::TempDir dir_;
  std::string path_ = dir_.str() + "/tuning.json";
  std::optional<test::ScopedEnv> env_;
};

LinearOptions options(std::int64_t max_tokens) {
  LinearOptions o;
  o.max_tokens = max_tokens;
  o.output = OutputType::fp32;
  return o;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// The layer's calls of `counts` tokens match the scalar reference.
void expect_computes(Linear& layer, const Fp4Weight& w, std::initializer_list<std::int64_t> counts) {
  const std::vector<std::uint16_t> x = test::random_activations(std::max(counts), kK, 4);
  for (std::int64_t m : counts) {
    const std::vector<std::uint16_t> xm(x.begin(), x.begin() + m * kK);
    std::vector<float> y;
    layer.run(xm, m, y);
    test::check_against_reference(kScheme, w, xm, m, {}, test::as_doubles(y), false, layer.kernel_description(m));
  }
}

// The test shape's layer of up to 600 tokens, as plan_linear_layer takes it (the tests set its
// device class).
LinearConfig planned_layer() {
  LinearConfig base;
  base.scheme = kScheme;
  base.n = kN;
  base.k = kK;
  base.max_tokens = 600;
  base.output = OutputType::fp32;
  return base;
}

TEST_F(TunedLayers, TunedParametersReachTheLinearKernels) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  use_database(linear_database());
  test::LogCapture log;
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  Linear layer = Linear::create(context(), w, kScheme, options(64));
  // Bucket 1 serves 1 and 2 tokens, bucket 8 serves 3 to 22, bucket 64 the rest.
  expect_contains(layer.kernel_description(1),
                  "gemv_rows(GEMV_TOKENS=3, GEMV_LOCAL=3, FP4CL_VEC=8, GEMV_DECODE_LUT=0) [tuned bucket 1 (" + path_);
  expect_contains(layer.kernel_description(2), "GEMV_TOKENS=3");
  expect_contains(layer.kernel_description(3), "GEMV_TOKENS=5, GEMV_LOCAL=2");  // the rest built-in
  expect_contains(layer.kernel_description(22), "[tuned bucket 8");
  EXPECT_EQ(layer.kernel_name(23), "gemm_tiled");
  expect_contains(layer.kernel_description(64),
                  "gemm_tiled(GEMM_TILE_M=16, GEMM_TILE_N=32, GEMM_TILE_K=64, GEMM_WI_M=2, GEMM_WI_N=2, FP4CL_VEC=8)");
  bool logged = false;
  for (const std::string& m : log.at(log::Level::info)) logged |= m.find("tuned buckets 1 (gemv_rows)") != std::string::npos;
  EXPECT_TRUE(logged);
  // And the tuned kernels compute the layer.
  expect_computes(layer, w, {1, 3, 64});
}

// Buckets above 1 only: the counts below the smallest bucket's share keep the built-in plan.
TEST_F(TunedLayers, CountsBelowTheSmallestBucketUseTheBuiltInPlan) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  use_entries({linear_entry(64, "gemv_rows", {{"GEMV_TOKENS", 5}, {"GEMV_LOCAL", 2}}),
               linear_entry(512, "gemv_rows", {{"GEMV_TOKENS", 6}, {"GEMV_LOCAL", 2}})});
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  Linear layer = Linear::create(context(), w, kScheme, options(600));
  for (std::int64_t m : {std::int64_t{1}, std::int64_t{8}, std::int64_t{45}}) {
    expect_contains(layer.kernel_description(m), "[built-in");
    EXPECT_EQ(layer.kernel_description(m).find("GEMV_TOKENS=5"), std::string::npos) << m;
  }
  // Bucket 64 serves 46 to 181 tokens (floor(sqrt(64 · 512))), bucket 512 the rest.
  expect_contains(layer.kernel_description(46), "GEMV_TOKENS=5, GEMV_LOCAL=2,");
  expect_contains(layer.kernel_description(46), "[tuned bucket 64");
  expect_contains(layer.kernel_description(181), "[tuned bucket 64");
  expect_contains(layer.kernel_description(182), "GEMV_TOKENS=6, GEMV_LOCAL=2,");
  expect_contains(layer.kernel_description(182), "[tuned bucket 512");
  expect_contains(layer.kernel_description(600), "[tuned bucket 512");
  // A layer that never reaches the smallest bucket's share runs the built-in plan alone.
  Linear small = Linear::create(context(), w, kScheme, options(40));
  for (std::int64_t m : {std::int64_t{1}, std::int64_t{40}}) expect_contains(small.kernel_description(m), "[built-in");
  // Both compute the layer.
  expect_computes(layer, w, {1, 50});
}

// Without entries the built-in plan switches from the decode kernel to the prefill one at the
// device class's crossover: 32 tokens, 64 on CPUs with 16 floats a vector (AVX-512), where the
// decode kernel and gemm_tiled are level from 48 to 64 tokens.
TEST_F(TunedLayers, TheBuiltInCrossoverFollowsTheDeviceClass) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  use_entries({});
  EXPECT_EQ(tuning::linear_default_decode_max_tokens(DeviceKind::cpu, 16), 64);
  EXPECT_EQ(tuning::linear_default_decode_max_tokens(DeviceKind::cpu, 8), 32);
  EXPECT_EQ(tuning::linear_default_decode_max_tokens(DeviceKind::gpu, 16), 32);
  EXPECT_EQ(tuning::linear_default_decode_max_tokens(DeviceKind::gpu, 1), 32);
  LinearConfig base = planned_layer();
  for (const DeviceKind kind : {DeviceKind::gpu, DeviceKind::cpu}) {
    SCOPED_TRACE(to_string(kind));
    base.device = kind;
    const LinearPlan plan = plan_linear_layer(context(), base, options(600), linear_kernels());
    if (plan.steps.size() == 1) {  // one kernel and parameters for both (NVIDIA's mma): merged
      EXPECT_EQ(plan.steps[0].last_tokens, 600);
      continue;
    }
    ASSERT_EQ(plan.steps.size(), 2u);
    EXPECT_EQ(plan.steps[0].last_tokens,
              tuning::linear_default_decode_max_tokens(kind, context().info().preferred_float_width));
    EXPECT_EQ(plan.steps[1].last_tokens, 600);
    EXPECT_NE(plan.steps[0].kernel, plan.steps[1].kernel);
  }
}

// Decode buckets only: counts past the decode/prefill crossover take the built-in plan's prefill
// steps, not the largest decode bucket's parameters (GPUs: past 32 tokens; CPUs with 16 floats a
// vector: past 64); on CPUs with narrower vectors the largest bucket serves every larger count.
TEST_F(TunedLayers, DecodeBucketsDoNotServePrefillCounts) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  use_entries({linear_entry(1, "gemv_rows", {{"GEMV_TOKENS", 3}, {"GEMV_LOCAL", 3}}),
               linear_entry(8, "gemv_rows", {{"GEMV_TOKENS", 5}, {"GEMV_LOCAL", 2}})});
  LinearConfig base = planned_layer();
  const unsigned width = context().info().preferred_float_width;
  for (const DeviceKind kind : {DeviceKind::gpu, DeviceKind::cpu}) {
    SCOPED_TRACE(to_string(kind));
    base.device = kind;
    const LinearPlan plan = plan_linear_layer(context(), base, options(600), linear_kernels());
    ASSERT_GE(plan.steps.size(), 2u);
    EXPECT_EQ(plan.steps[0].last_tokens, 2);  // bucket 1: floor(sqrt(1 · 8))
    expect_contains(plan.steps[0].origin, "tuned bucket 1");
    expect_contains(plan.steps[1].origin, "tuned bucket 8");
    if (kind == DeviceKind::gpu || width >= 16) {
      const std::int64_t crossover = tuning::linear_default_decode_max_tokens(kind, width);
      EXPECT_EQ(crossover, kind == DeviceKind::gpu ? 32 : 64);
      EXPECT_EQ(plan.steps[1].last_tokens, crossover);
      ASSERT_EQ(plan.steps.size(), 3u);
      expect_contains(plan.steps[2].origin,
                      kind == DeviceKind::gpu ? "built-in GPU defaults" : "built-in CPU defaults");
      EXPECT_EQ(plan.steps[2].last_tokens, 600);
    } else {
      EXPECT_EQ(plan.steps[1].last_tokens, 600);
      EXPECT_EQ(plan.steps.size(), 2u);
    }
  }
  // A layer on this device runs bucket 8's parameters from 3 tokens up to the crossover (or to
  // every count on a CPU with narrower vectors), and both its plans compute the layer.
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  Linear layer = Linear::create(context(), w, kScheme, options(600));
  const DeviceKind here = context().info().kind;
  for (std::int64_t m : {std::int64_t{3}, std::int64_t{32}})
    expect_contains(layer.kernel_description(m), "[tuned bucket 8");
  if (here == DeviceKind::cpu && width < 16)
    expect_contains(layer.kernel_description(600), "[tuned bucket 8");
  else
    expect_contains(layer.kernel_description(600), "[built-in");
  expect_computes(layer, w, {3, 200});
}

TEST_F(TunedLayers, ExplicitOptionsOverrideTheDatabase) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  use_database(linear_database());
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  LinearOptions o = options(64);
  o.tuning = {{"GEMV_TOKENS", 6}};
  Linear layer = Linear::create(context(), w, kScheme, o);
  expect_contains(layer.kernel_description(8), "GEMV_TOKENS=6, GEMV_LOCAL=2");
  // A forced strategy takes the tuned parameters of its own buckets only.
  o.tuning.clear();
  o.kernel = "gemv_rows";
  Linear forced_rows = Linear::create(context(), w, kScheme, o);
  EXPECT_EQ(forced_rows.kernel_name(64), "gemv_rows");
  expect_contains(forced_rows.kernel_description(1), "GEMV_TOKENS=3");
  // decode_max_tokens sets the database aside.
  o.kernel.clear();
  o.decode_max_tokens = 16;
  Linear manual = Linear::create(context(), w, kScheme, o);
  expect_contains(manual.kernel_description(1), "built-in");
}

TEST_F(TunedLayers, MissingShapeUsesTheClassDefaults) {
  use_database(linear_database());
  test::LogCapture log;
  const Fp4Weight w = test::random_weight(kScheme.weight, kN + 8, kK, 3);  // not in the database
  Linear layer = Linear::create(context(), w, kScheme, options(8));
  expect_contains(layer.kernel_description(1), "built-in");
  bool logged = false;
  for (const std::string& m : log.at(log::Level::info)) logged |= m.find("no tuned entry") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST_F(TunedLayers, CorruptDatabaseFallsBackToDefaultsWithAWarning) {
  test::LogCapture log;
  use_text("{\"schema\": \"fp4cl-tuning\", \"version\": 1, \"devices\": [{");
  ASSERT_FALSE(log.warnings().empty());
  expect_contains(log.warnings()[0], path_);
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  Linear layer = Linear::create(context(), w, kScheme, options(8));
  expect_contains(layer.kernel_description(1), "built-in");
}

TEST_F(TunedLayers, AnEntryAKernelRefusesFallsBackWithAWarning) {
  const test::ScopedEnv forced("FP4CL_LINEAR_KERNEL", std::nullopt);
  tuning::Database db;
  db.put(tuning::DeviceIdentity::of(context().info()), linear_entry(1, "gemv_rows", {{"GEMV_LOCAL", 0}}));
  use_database(db);
  test::LogCapture log;
  const Fp4Weight w = test::random_weight(kScheme.weight, kN, kK, 3);
  Linear layer = Linear::create(context(), w, kScheme, options(4));
  expect_contains(layer.kernel_description(1), "built-in");
  ASSERT_FALSE(log.warnings().empty());
  expect_contains(log.warnings()[0], "GEMV_LOCAL = 0");
}

TEST_F(TunedLayers, TunedTilesReachTheMoeStrategies) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const test::ScopedEnv forced("FP4CL_MOE_KERNEL", std::nullopt);
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::bf16};
  tuning::Entry e;
  e.op = "moe";
  e.scheme = tuning::scheme_key(scheme);
  e.shape = {{"hidden", 64}, {"inter", 64}, {"experts", 4}, {"topk", 2}};
  e.tokens = 1;
  e.kernel = "decode";
  e.params = {{"vec", 4}, {"group", 8}, {"tile_m", 1}, {"local_i", 4}, {"local_h", 3}};
  tuning::Database db;
  const tuning::DeviceIdentity device = tuning::DeviceIdentity::of(context().info());
  db.put(device, e);
  e.tokens = 16;
  e.kernel = "grouped";
  e.params = {{"vec", 4}, {"group", 8}, {"tile_m", 2}, {"local_i", 2}, {"local_h", 1}};
  db.put(device, e);
  use_database(db);
  const MoeSelection sel = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "");
  EXPECT_EQ(sel.layout.vec, 4);
  EXPECT_EQ(sel.layout.group, 8);
  EXPECT_EQ(sel.decode_max_pairs, 4 * 2);  // buckets 1 and 16: decode serves up to 4 tokens
  for (const MoeSelection::Entry& s : sel.usable) {
    if (s.id == MoeStrategy::decode) {
      EXPECT_EQ(s.tiles.local_i, 4);
      EXPECT_EQ(s.tiles.local_h, 3);
    } else if (s.id == MoeStrategy::grouped) {
      EXPECT_EQ(s.tiles.tile_m, 2);
      EXPECT_EQ(s.tiles.local_i, 2);
      EXPECT_EQ(s.tiles.local_h, 1);
    }
  }
  // A second grouped bucket gives its tiles to the calls nearest it (bucket 4 beside 16: up to
  // 8 tokens); the largest bucket's serve every larger call.
  {
    tuning::Database two = db;
    e.tokens = 4;
    e.kernel = "grouped";
    e.params = {{"vec", 4}, {"group", 8}, {"tile_m", 4}, {"local_i", 1}, {"local_h", 2}};
    two.put(device, e);
    use_database(two);
    const auto grouped_of = [](const MoeSelection& from) {
      std::vector<const MoeSelection::Entry*> out;
      for (const MoeSelection::Entry& s : from.usable)
        if (s.id == MoeStrategy::grouped) out.push_back(&s);
      return out;
    };
    test::LogCapture log;
    const MoeSelection both = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "");
    const std::vector<const MoeSelection::Entry*> grouped = grouped_of(both);
    // (On tensor cores mma serves every call and grouped is not built: the forced selection below
    // covers grouped there.)
    if (!both.uses(MoeStrategy::mma)) {
      ASSERT_EQ(grouped.size(), 2u);
      EXPECT_EQ(grouped[0]->tiles.tile_m, 4);
      EXPECT_EQ(grouped[0]->tiles.local_i, 1);
      EXPECT_EQ(grouped[0]->tiles.local_h, 2);
      EXPECT_EQ(grouped[0]->max_pairs, 8 * 2);  // floor(sqrt(4 · 16)) tokens × k
      EXPECT_EQ(grouped[1]->tiles.tile_m, 2);   // bucket 16's
      EXPECT_EQ(grouped[1]->max_pairs, std::numeric_limits<std::int64_t>::max());
      EXPECT_EQ(both.decode_max_pairs, 2 * 2);  // buckets 1 (decode) and 4 (grouped) meet at 2 tokens
      if (both.uses(MoeStrategy::decode)) {
        EXPECT_EQ(both.for_tokens(2, 2).id, MoeStrategy::decode);
      }
      EXPECT_EQ(&both.for_tokens(3, 2), grouped[0]);
      EXPECT_EQ(&both.for_tokens(8, 2), grouped[0]);
      EXPECT_EQ(&both.for_tokens(9, 2), grouped[1]);
    } else {
      EXPECT_TRUE(grouped.empty());
    }
    for (const std::string& line : log.at(log::Level::info))
      EXPECT_EQ(line.find("grouped's tiles from bucket"), std::string::npos) << line;
    // A forced grouped takes both as well.
    const MoeSelection named = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "grouped");
    ASSERT_EQ(named.usable.size(), 2u);
    EXPECT_EQ(&named.for_tokens(3, 2), &named.usable[0]);
    EXPECT_EQ(&named.for_tokens(9, 2), &named.usable[1]);
    // One set of tiles (batch invariance): one entry, the largest bucket's tiles. grouped's tiles
    // from FP4CL_MOE_TILES: each bucket's, with the variable's values over them.
    const MoeSelection one = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "grouped", true);
    ASSERT_EQ(grouped_of(one).size(), 1u);
    EXPECT_EQ(grouped_of(one)[0]->tiles.tile_m, 2);
    {
      const test::ScopedEnv env_tiles("FP4CL_MOE_TILES", "grouped.local_h=4");
      const MoeSelection from_env = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "grouped");
      ASSERT_EQ(grouped_of(from_env).size(), 2u);
      EXPECT_EQ(grouped_of(from_env)[0]->tiles.tile_m, 4);
      EXPECT_EQ(grouped_of(from_env)[1]->tiles.tile_m, 2);
      EXPECT_EQ(grouped_of(from_env)[0]->tiles.local_h, 4);
      EXPECT_EQ(grouped_of(from_env)[1]->tiles.local_h, 4);
      const MoeSelection one_env =
          select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "grouped", true);
      ASSERT_EQ(grouped_of(one_env).size(), 1u);
      EXPECT_EQ(grouped_of(one_env)[0]->tiles.tile_m, 2);
      EXPECT_EQ(grouped_of(one_env)[0]->tiles.local_h, 4);
    }
    // The layer runs each call with its bucket's tiles, and computes it.
    const Fp4Experts ex = test::make_experts({scheme.weight, 4, 64, 64, test::Data::exact, 72});
    MoeConfig cfg;
    cfg.scheme = scheme;
    cfg.top_k = 2;
    cfg.max_tokens = 16;
    cfg.kernel = "grouped";
    MoeLayer layer = MoeLayer::create(test::test_context(), ex, cfg);  // the context of the helper's buffers
    EXPECT_EQ(layer.tile_pairs_for(3), 4);
    EXPECT_EQ(layer.tile_pairs_for(9), 2);
    for (const std::int64_t T : {std::int64_t{3}, std::int64_t{9}})
      EXPECT_TRUE(test::topk_matches_reference_twice(layer, ex, cfg, T, 73)) << T << " tokens";
    cfg.batch_invariant = true;
    EXPECT_EQ(MoeLayer::create(test::test_context(), ex, cfg).tile_pairs_for(3), 2);
  }
  // A bucket won by split (GPUs) gives it its tiles and the crossover: buckets 1 (split) and 4
  // (decode) meet at 2 tokens.
  e.tokens = 1;
  e.kernel = "split";
  e.params = {{"vec", 4}, {"group", 8}, {"tile_m", 2}, {"local_i", 64}, {"local_h", 32}};
  db.put(device, e);
  e.tokens = 4;
  e.kernel = "decode";
  e.params = {{"vec", 4}, {"group", 8}, {"tile_m", 1}, {"local_i", 4}, {"local_h", 3}};
  db.put(device, e);
  use_database(db);
  const MoeSelection with_split = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "");
  EXPECT_EQ(with_split.split_max_pairs, 2 * 2);
  bool has_split = false;
  for (const MoeSelection::Entry& s : with_split.usable) {
    if (s.id != MoeStrategy::split) continue;
    has_split = true;
    EXPECT_EQ(s.tiles.tile_m, 2);
    EXPECT_EQ(s.tiles.local_i, 64);
    EXPECT_EQ(s.tiles.local_h, 32);
  }
  EXPECT_TRUE(has_split);
  EXPECT_EQ(with_split.for_tokens(2, 2).id, MoeStrategy::split);
  EXPECT_EQ(with_split.for_tokens(3, 2).id, MoeStrategy::decode);
  // FP4CL_MOE_TILES still wins over the database.
  const test::ScopedEnv override_tiles("FP4CL_MOE_TILES", std::string("grouped.tile_m=4"));
  const MoeSelection env = select_moe_strategies(context().info(), 8, {scheme, 64, 64, 4, 2}, "grouped");
  EXPECT_EQ(env.usable.front().tiles.tile_m, 4);
  EXPECT_EQ(env.layout.vec, 4);
}

// The mma strategy's tuned parameters (emulated MMAs off NVIDIA, so forced here): each bucket mma
// won gives its calls its tiles (one set of tiles: those of chunks with many pairs from the
// largest bucket, those of chunks with few pairs from the smallest), and they reach the kernels'
// build options: MMA_NT = tile_m / 8, the K split and row
// tiles of mma_geometry, MMA_UNROLL.
class TunedMma : public TunedLayers {
 protected:
  static constexpr std::int64_t kH = 128, kI = 64, kE = 4;
  static constexpr int kK = 2;
  tuning::Entry entry(std::int64_t tokens, const std::string& kernel, tuning::Params params) const {
    tuning::Entry e;
    e.op = "moe";
    e.scheme = tuning::scheme_key(kScheme);
    e.shape = {{"hidden", kH}, {"inter", kI}, {"experts", kE}, {"topk", kK}};
    e.tokens = tokens;
    e.kernel = kernel;
    e.params = std::move(params);
    return e;
  }
  void use_entries(const std::vector<tuning::Entry>& entries) {
    tuning::Database db;
    const tuning::DeviceIdentity device = tuning::DeviceIdentity::of(test::test_context().info());
    for (const tuning::Entry& e : entries) db.put(device, e);
    use_database(db);
  }
  MoeSelection select(const std::string& kernel) const {
    cl_uint width = 1;
    test::test_context().device().getInfo(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &width);
    return select_moe_strategies(test::test_context().info(), width, {kScheme, kH, kI, kE, kK}, kernel);
  }
  // A layer of the mma strategy over the fixture's shape (its programs built, their debug lines
  // in whatever LogCapture is live).
  static MoeLayer mma_layer(std::int64_t max_tokens, std::uint64_t seed) {
    MoeConfig cfg;
    cfg.scheme = kScheme;
    cfg.top_k = kK;
    cfg.max_tokens = max_tokens;
    cfg.kernel = "mma";
    return MoeLayer::create(test::test_context(),
                            test::make_experts({kScheme.weight, kE, kH, kI, test::Data::exact, seed}), cfg);
  }
  const test::ScopedEnv no_tiles_{"FP4CL_MOE_TILES", std::nullopt};
  const test::ScopedEnv no_kernel_{"FP4CL_MOE_KERNEL", std::nullopt};
};

// With tensor cores (NVIDIA, compute capability 8.0 or more) mma serves every call, so grouped,
// decode and split are not built (no programs, no weights in their layouts: as many bytes again as
// mma's) unless a crossover of theirs is set.
TEST_F(TunedLayers, BesideMmaOnlyStrategiesThatServeCallsAreBuilt) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const test::ScopedEnv forced("FP4CL_MOE_KERNEL", std::nullopt);
  use_entries({});
  DeviceInfo gpu = context().info();  // described as a tensor-core GPU
  gpu.kind = DeviceKind::gpu;
  gpu.nv_compute_capability = 90;
  const MoeProblem problem{{WeightFormat::nvfp4, Activations::bf16}, 64, 64, 4, 2};
  const MoeSelection sel = select_moe_strategies(gpu, 8, problem, "");
  ASSERT_EQ(sel.usable.size(), 1u);
  EXPECT_EQ(sel.usable[0].id, MoeStrategy::mma);
  EXPECT_EQ(sel.decode_max_pairs, 0);
  EXPECT_EQ(sel.split_max_pairs, 0);
  // decode's crossover set: decode stays for the calls it serves, grouped still goes.
  const test::ScopedEnv env_tiles("FP4CL_MOE_TILES", "decode_max_pairs=8");
  const MoeSelection with_decode = select_moe_strategies(gpu, 8, problem, "");
  EXPECT_TRUE(with_decode.uses(MoeStrategy::decode));
  EXPECT_TRUE(with_decode.uses(MoeStrategy::mma));
  EXPECT_FALSE(with_decode.uses(MoeStrategy::grouped));
  EXPECT_FALSE(with_decode.uses(MoeStrategy::split));
  EXPECT_EQ(with_decode.for_tokens(4, 2).id, MoeStrategy::decode);
  EXPECT_EQ(with_decode.for_tokens(5, 2).id, MoeStrategy::mma);
}

// On CPUs decode (one weight pass a pair) serves up to 16 pairs and no more pairs than local
// experts: past that some expert has two pairs, which grouped streams once. GPUs without tensor
// cores keep 64.
TEST_F(TunedLayers, CpuDecodeServesNoMorePairsThanExperts) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::nullopt);
  const test::ScopedEnv forced("FP4CL_MOE_KERNEL", std::nullopt);
  use_entries({});
  DeviceInfo cpu = context().info();
  cpu.kind = DeviceKind::cpu;
  cpu.nv_compute_capability = 0;
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::bf16};
  const MoeProblem few{scheme, 64, 64, 8, 2};  // mixtral-like: 8 experts, k = 2
  const MoeSelection few_sel = select_moe_strategies(cpu, 8, few, "");
  EXPECT_EQ(few_sel.decode_max_pairs, 8);
  EXPECT_EQ(few_sel.for_tokens(4, 2).id, MoeStrategy::decode);
  EXPECT_EQ(few_sel.for_tokens(5, 2).id, MoeStrategy::grouped);
  const MoeProblem many{scheme, 64, 64, 128, 2};
  const MoeSelection many_sel = select_moe_strategies(cpu, 8, many, "");
  EXPECT_EQ(many_sel.decode_max_pairs, 16);
  EXPECT_EQ(many_sel.for_tokens(8, 2).id, MoeStrategy::decode);
  EXPECT_EQ(many_sel.for_tokens(9, 2).id, MoeStrategy::grouped);
  DeviceInfo gpu = cpu;  // no tensor cores
  gpu.kind = DeviceKind::gpu;
  EXPECT_EQ(select_moe_strategies(gpu, 8, few, "").decode_max_pairs, 64);
}

// The shipped H200 database (tuning/nvidia-h200.json): its MoE entries reach the selection of a
// layer on that device (no GPU here: the device is described), one mma entry a set of tiles its
// buckets give. (An H100, the similar device, has its own mixtral entries since 2026-12-06: the
// next test.)
TEST_F(TunedLayers, ShippedH200MoeEntriesReachTheMmaSelection) {
  const ShippedDatabasesOnly databases;
  DeviceInfo gpu = test::described_h200();
  const QuantScheme w4a4{WeightFormat::nvfp4, Activations::fp4_dynamic};
  const MoeProblem mixtral_w4a4{w4a4, 4096, 14336, 8, 2};
  const MoeSelection sel = select_moe_strategies(gpu, 1, mixtral_w4a4, "");
  // Bucket 1 gives the built-in tiles with FC2's chunks loaded 8 ahead (up to floor(sqrt(1 · 8))
  // = 2 tokens), bucket 8 the few-pairs K split 4 with FC2's loaded 4 ahead (up to
  // floor(sqrt(8 · 64)) = 22 tokens), bucket 64 tiles of 16 pairs with local sizes 64 and 128
  // (up to floor(sqrt(64 · 512)) = 181 tokens), bucket 512 tiles of 64 pairs with 2 row tiles
  // a warp.
  ASSERT_EQ(sel.usable.size(), 4u);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(sel.usable[b].id, MoeStrategy::mma);
    EXPECT_EQ(sel.usable[b].tiles.tile_m, 32);
    EXPECT_EQ(sel.usable[b].tiles.warp_tiles, 1);
    EXPECT_EQ(sel.usable[b].tiles.unroll, 4);
  }
  EXPECT_EQ(sel.usable[0].max_pairs, 2 * 2);
  EXPECT_EQ(sel.usable[0].tiles.few_split_k, 0);
  EXPECT_EQ(sel.usable[0].tiles.fc2_unroll, 8);
  EXPECT_EQ(sel.usable[0].origin, "tuned bucket 1 (tuning/nvidia-h200.json (shipped))");
  EXPECT_EQ(sel.usable[1].max_pairs, 22 * 2);
  EXPECT_EQ(sel.usable[1].tiles.few_split_k, 4);
  EXPECT_EQ(sel.usable[1].tiles.fc2_unroll, 4);
  EXPECT_EQ(sel.usable[1].origin, "tuned bucket 8 (tuning/nvidia-h200.json (shipped))");
  EXPECT_EQ(sel.usable[2].max_pairs, 181 * 2);
  EXPECT_EQ(sel.usable[2].tiles.tile_m, 16);
  EXPECT_EQ(sel.usable[2].tiles.local_i, 64);
  EXPECT_EQ(sel.usable[2].tiles.local_h, 128);
  EXPECT_EQ(sel.usable[2].origin, "tuned bucket 64 (tuning/nvidia-h200.json (shipped))");
  EXPECT_EQ(sel.usable[3].origin, "tuned bucket 512 (tuning/nvidia-h200.json (shipped))");
  EXPECT_EQ(sel.usable[3].tiles.tile_m, 64);
  EXPECT_EQ(sel.usable[3].tiles.warp_tiles, 2);
  EXPECT_EQ(&sel.for_tokens(512, 2), &sel.usable[3]);
  EXPECT_EQ(&sel.for_tokens(64, 2), &sel.usable[2]);
  EXPECT_EQ(&sel.for_tokens(8, 2), &sel.usable[1]);
  EXPECT_EQ(&sel.for_tokens(3, 2), &sel.usable[1]);
  EXPECT_EQ(&sel.for_tokens(2, 2), &sel.usable[0]);
  EXPECT_EQ(&sel.for_tokens(1, 2), &sel.usable[0]);
  // W4A16: bucket 8 its own few-pairs K split and unroll (4 and 4); bucket 1 FC1's chunks loaded 4
  // ahead (on the H200 7 of its work-groups a compute unit rather than 4: its 1792 in 1.9 passes
  // rather than 3.4) and FC2's 8; bucket 64 the built-in 0 and 8.
  const MoeSelection w4a16 =
      select_moe_strategies(gpu, 1, {{WeightFormat::nvfp4, Activations::bf16}, 4096, 14336, 8, 2}, "");
  EXPECT_EQ(w4a16.for_tokens(8, 2).tiles.few_split_k, 4);
  EXPECT_EQ(w4a16.for_tokens(8, 2).tiles.unroll, 4);
  EXPECT_EQ(w4a16.for_tokens(1, 2).tiles.unroll, 4);
  EXPECT_EQ(w4a16.for_tokens(1, 2).tiles.fc2_unroll, 8);
  EXPECT_EQ(w4a16.for_tokens(1, 2).tiles.few_split_k, 0);
  EXPECT_EQ(w4a16.for_tokens(64, 2).tiles.few_split_k, 0);
  EXPECT_EQ(w4a16.for_tokens(64, 2).tiles.unroll, 8);
  // qwen3-30b-a3b: the routed FC1's work-groups by bucket (buckets 1, 4, 6, 8: bucket 1 serves up
  // to floor(sqrt(1 · 4)) = 2 tokens, bucket 4 up to floor(sqrt(4 · 6)) = 4, bucket 6 up to
  // floor(sqrt(6 · 8)) = 6, bucket 8 from 7): buckets 6 and 8 2 row tiles and 2 blocks of rows a
  // work-group and FC2's chunks loaded 4 ahead (its K, 12 chunks, in 3 steps) under both schemes,
  // the token FC2 2 row tiles a warp in bucket 6 and 4 in bucket 8, and bucket 6's routed W4A4 FC1
  // 2 row tiles a warp; bucket 4 2 row tiles under W4A16 and the automatic geometry under W4A4,
  // bucket 1 the automatic one.
  for (const Activations activations : {Activations::bf16, Activations::fp4_dynamic}) {
    const bool w4a16_scheme = activations == Activations::bf16;
    const MoeSelection qwen3 =
        select_moe_strategies(gpu, 1, {{WeightFormat::nvfp4, activations}, 2048, 768, 128, 8}, "");
    struct Expected {
      std::int64_t tokens, bucket;
      int row_tiles, row_loop, fc2_unroll, token_fc2_warp_tiles, routed_warp_tiles;
    };
    const int bucket4_row_tiles = w4a16_scheme ? 2 : 0;
    const int bucket6_warp_tiles = w4a16_scheme ? 0 : 2;
    for (const Expected& x :
         {Expected{1, 1, 0, 0, 0, 0, 0}, Expected{2, 1, 0, 0, 0, 0, 0}, Expected{3, 4, bucket4_row_tiles, 0, 0, 0, 0},
          Expected{4, 4, bucket4_row_tiles, 0, 0, 0, 0}, Expected{5, 6, 2, 2, 4, 2, bucket6_warp_tiles},
          Expected{6, 6, 2, 2, 4, 2, bucket6_warp_tiles}, Expected{7, 8, 2, 2, 4, 4, 0},
          Expected{8, 8, 2, 2, 4, 4, 0}}) {
      const MoeSelection::Entry& chosen = qwen3.for_tokens(x.tokens, 8);
      EXPECT_EQ(chosen.tiles.routed_row_tiles, x.row_tiles) << x.tokens;
      EXPECT_EQ(chosen.tiles.routed_row_loop, x.row_loop) << x.tokens;
      EXPECT_EQ(chosen.tiles.fc2_unroll, x.fc2_unroll) << x.tokens;
      EXPECT_EQ(chosen.tiles.token_fc2_warp_tiles, x.token_fc2_warp_tiles) << x.tokens;
      EXPECT_EQ(chosen.tiles.routed_warp_tiles, x.routed_warp_tiles) << x.tokens;
      EXPECT_EQ(chosen.origin, fmt::format("tuned bucket {} (tuning/nvidia-h200.json (shipped))", x.bucket))
          << x.tokens;
    }
  }
  // A user database (the user's config file) holding the shipped mixtral W4A4 entry of one bucket,
  // with the tiles of the shipped entry of bucket `tiles_of` (by default its own): its path.
  const auto user_database_with_bucket = [&](std::int64_t tokens, std::int64_t tiles_of = 0) {
    tuning::Database user;
    for (const tuning::EmbeddedDatabase& e : tuning::embedded_databases()) {
      if (std::string(e.name) != "tuning/nvidia-h200.json") continue;
      const tuning::Database shipped = tuning::parse_database(std::string(e.text), std::string(e.name));
      for (const tuning::DeviceTuning& d : shipped.devices) {
        const auto mixtral_w4a4_entry = [&](std::int64_t bucket) -> const tuning::Entry* {
          for (const tuning::Entry& entry : d.entries)
            if (entry.op == "moe" && entry.tokens == bucket && entry.scheme == "nvfp4-w4a4" &&
                entry.shape.at("experts") == 8)
              return &entry;
          return nullptr;
        };
        const tuning::Entry* entry = mixtral_w4a4_entry(tokens);
        const tuning::Entry* tiles_entry = mixtral_w4a4_entry(tiles_of > 0 ? tiles_of : tokens);
        if (entry == nullptr || tiles_entry == nullptr) continue;
        tuning::Entry copy = *entry;
        copy.params = tiles_entry->params;
        user.put(d.device, copy);
      }
    }
    EXPECT_EQ(user.devices.size(), 1u);
    const std::string path = databases.config.str() + "/fp4cl/tuning.json";
    std::filesystem::create_directories(databases.config.str() + "/fp4cl");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << tuning::to_json_text(user);
    tuning::reload_tuning_store();
    return path;
  };
  // Bucket 8 from the user with bucket 1's tiles: one entry for both, bucket 8 named with the
  // file it came from.
  {
    const std::string path = user_database_with_bucket(8, 1);
    const MoeSelection merged = select_moe_strategies(gpu, 1, mixtral_w4a4, "");
    ASSERT_EQ(merged.usable.size(), 3u);
    EXPECT_EQ(merged.usable[0].origin,
              "tuned bucket 1 (tuning/nvidia-h200.json (shipped)), tuned bucket 8 (" + path + ")");
    // One set of tiles (batch invariance): few-pairs values from bucket 1, many-pairs tiles from
    // bucket 512, both the shipped file's; bucket 8 gives none of them.
    const MoeSelection one = select_moe_strategies(gpu, 1, mixtral_w4a4, "", true);
    ASSERT_EQ(one.usable.size(), 1u);
    EXPECT_EQ(one.usable[0].origin, "tuned (tuning/nvidia-h200.json (shipped))");
  }
  // Bucket 512 from the user instead: the one set's many-pairs tiles are the user's, its
  // few-pairs values still the shipped file's, and the label names both.
  {
    const std::string path = user_database_with_bucket(512);
    const MoeSelection one = select_moe_strategies(gpu, 1, mixtral_w4a4, "", true);
    ASSERT_EQ(one.usable.size(), 1u);
    EXPECT_EQ(one.usable[0].origin, "tuned (tuning/nvidia-h200.json (shipped), " + path + ")");
    EXPECT_EQ(one.usable[0].tiles.tile_m, 64);
    EXPECT_EQ(one.usable[0].tiles.warp_tiles, 2);
  }
  // Another shape (no entry): the built-in tiles, one entry.
  const MoeSelection other = select_moe_strategies(gpu, 1, {w4a4, 4096, 14336, 16, 2}, "");
  ASSERT_EQ(other.usable.size(), 1u);
  EXPECT_EQ(other.usable[0].tiles.tile_m, 32);
}

// The shipped H100 database's MoE entries (tuning/nvidia-h100.json): an H100 takes its own file's
// rather than the H200's as a similar device's. qwen3-30b-a3b: buckets 1, 4, 6, 8, 64, 512; bucket
// 64 is the H100 tuner's (few_split_k 0; W4A4 FC1's chunks loaded 2 ahead and FC2's 4: on the H100
// 206–207 µs against 227–241 with the H200's entry, bench/gpu/h100/2026-12-05-b), the others the
// H200's, which held their own against the H100 tuner's there. mixtral-8x7b (bench/gpu/h100/2026-12-06):
// W4A4 the tuner's four buckets (T = 8 / 64 / 512 0.98 / 0.96 / 0.96 of the H200's time, T = 1 the
// H200's tiles), W4A16 the tuner's bucket 8 (0.94) and the H200's 1, 64 and 512 (the tuner's were
// 1.04 and 1.06 at 64 and 512).
TEST_F(TunedLayers, ShippedH100MoeEntriesServeTheH100) {
  const ShippedDatabasesOnly databases;
  DeviceInfo gpu = test::described_h200();
  gpu.name = "NVIDIA H100 80GB HBM3";
  for (const Activations activations : {Activations::bf16, Activations::fp4_dynamic}) {
    const bool w4a4 = activations == Activations::fp4_dynamic;
    SCOPED_TRACE(w4a4 ? "W4A4" : "W4A16");
    const tuning::Match m = tuning::tuning_store()->lookup(
        gpu, {"moe", w4a4 ? "nvfp4-w4a4" : "nvfp4-w4a16",
              {{"hidden", 2048}, {"inter", 768}, {"experts", 128}, {"topk", 8}}});
    ASSERT_NE(m.device, nullptr);
    EXPECT_FALSE(m.similar);
    EXPECT_EQ(m.device->device.name, "NVIDIA H100 80GB HBM3");
    std::vector<std::int64_t> buckets;
    for (const tuning::Entry* e : m.entries) buckets.push_back(e->tokens);
    EXPECT_EQ(buckets, (std::vector<std::int64_t>{1, 4, 6, 8, 64, 512}));
    const MoeSelection qwen3 =
        select_moe_strategies(gpu, 1, {{WeightFormat::nvfp4, activations}, 2048, 768, 128, 8}, "");
    const MoeSelection::Entry& b64 = qwen3.for_tokens(64, 8);
    EXPECT_EQ(b64.origin, "tuned bucket 64 (tuning/nvidia-h100.json (shipped))");
    EXPECT_EQ(b64.tiles.few_split_k, 0);
    EXPECT_EQ(b64.tiles.unroll, w4a4 ? 2 : 8);
    EXPECT_EQ(b64.tiles.fc2_unroll, w4a4 ? 4 : 1);
    // Bucket 8 as the H200's: the token FC2 4 row tiles a warp.
    EXPECT_EQ(qwen3.for_tokens(8, 8).tiles.token_fc2_warp_tiles, 4);
    EXPECT_EQ(qwen3.for_tokens(8, 8).origin, "tuned bucket 8 (tuning/nvidia-h100.json (shipped))");
  }
  const MoeSelection mixtral_w4a4 =
      select_moe_strategies(gpu, 1, {{WeightFormat::nvfp4, Activations::fp4_dynamic}, 4096, 14336, 8, 2}, "");
  const MoeSelection mixtral_w4a16 =
      select_moe_strategies(gpu, 1, {{WeightFormat::nvfp4, Activations::bf16}, 4096, 14336, 8, 2}, "");
  for (const MoeSelection* mixtral : {&mixtral_w4a4, &mixtral_w4a16})
    for (const std::int64_t bucket : {1, 8, 64, 512})
      EXPECT_EQ(mixtral->for_tokens(bucket, 2).origin,
                fmt::format("tuned bucket {} (tuning/nvidia-h100.json (shipped))", bucket));
  // W4A4 bucket 8: no few-pairs K split, FC1's chunks loaded 8 ahead and FC2's 2 (the H200's: 4, 4, 4).
  EXPECT_EQ(mixtral_w4a4.for_tokens(8, 2).tiles.few_split_k, 0);
  EXPECT_EQ(mixtral_w4a4.for_tokens(8, 2).tiles.unroll, 8);
  EXPECT_EQ(mixtral_w4a4.for_tokens(8, 2).tiles.fc2_unroll, 2);
  // W4A4 bucket 64: tiles of 16 pairs with local sizes 128 and 32 (the H200's: 64 and 128).
  EXPECT_EQ(mixtral_w4a4.for_tokens(64, 2).tiles.tile_m, 16);
  EXPECT_EQ(mixtral_w4a4.for_tokens(64, 2).tiles.local_i, 128);
  EXPECT_EQ(mixtral_w4a4.for_tokens(64, 2).tiles.local_h, 32);
  // W4A16: bucket 8 the tuner's, the others the H200's.
  EXPECT_EQ(mixtral_w4a16.for_tokens(8, 2).tiles.few_split_k, 0);  // the H200's: 4
  EXPECT_EQ(mixtral_w4a16.for_tokens(8, 2).tiles.unroll, 8);       // the H200's: 4
  EXPECT_EQ(mixtral_w4a16.for_tokens(64, 2).tiles.unroll, 8);      // as the H200's
  EXPECT_EQ(mixtral_w4a16.for_tokens(1, 2).tiles.unroll, 4);       // as the H200's
}

// The shipped H200 database's linear entries (NVFP4 W4A4 at 4096 × 4096, 2048 × 768 and 1536 ×
// 2048, buckets 1, 2, 4, 8, 64, 512; W4A16 at 1536 × 2048, buckets 64 and 512, its decode the
// built-in plan's) serve the H200, while the keys it holds none of (W4A16 4096 × 4096, the
// 28672 × 4096 ones) still come from the H100's file as a similar device's, and an H100 keeps its
// own entries for every key.
TEST_F(TunedLayers, ShippedH200LinearEntriesServeTheH200) {
  const ShippedDatabasesOnly databases;
  DeviceInfo gpu = test::described_h200();
  const auto key = [](const char* scheme, std::int64_t n, std::int64_t k) {
    return tuning::LookupKey{"linear", scheme, {{"n", n}, {"k", k}}};
  };
  const auto buckets = [](const tuning::Match& m) {
    std::vector<std::int64_t> out;
    for (const tuning::Entry* e : m.entries) out.push_back(e->tokens);
    return out;
  };
  const std::vector<std::int64_t> all{1, 2, 4, 8, 64, 512};
  for (const auto& [scheme, n, k] : std::vector<std::tuple<const char*, std::int64_t, std::int64_t>>{
           {"nvfp4-w4a4", 4096, 4096}, {"nvfp4-w4a4", 2048, 768}, {"nvfp4-w4a4", 1536, 2048},
           {"nvfp4-w4a16", 1536, 2048}}) {
    SCOPED_TRACE(fmt::format("{} {}x{}", scheme, n, k));
    const tuning::Match m = tuning::tuning_store()->lookup(gpu, key(scheme, n, k));
    ASSERT_NE(m.device, nullptr);
    EXPECT_FALSE(m.similar);
    EXPECT_EQ(m.device->device.name, "NVIDIA H200");
    const std::vector<std::int64_t> prefill{64, 512};
    EXPECT_EQ(buckets(m), std::string(scheme) == "nvfp4-w4a4" ? all : prefill);
    for (const tuning::Entry* e : m.entries) {
      EXPECT_EQ(e->kernel, "mma");
      EXPECT_EQ(e->origin, "tuning/nvidia-h200.json (shipped)");
    }
  }
  // 4096 × 4096 W4A4 prefill: bucket 512 takes 4 row tiles and token tiles of 64 (84 µs on the
  // H200 against the built-in plan's 173).
  const tuning::Match prefill = tuning::tuning_store()->lookup(gpu, key("nvfp4-w4a4", 4096, 4096));
  ASSERT_EQ(prefill.entries.size(), all.size());
  EXPECT_EQ(prefill.entries.back()->params.at("MMA_MT"), 4);
  EXPECT_EQ(prefill.entries.back()->params.at("MMA_NT"), 8);
  for (const auto& [scheme, n, k] : std::vector<std::tuple<const char*, std::int64_t, std::int64_t>>{
           {"nvfp4-w4a16", 4096, 4096}, {"nvfp4-w4a16", 28672, 4096}, {"nvfp4-w4a4", 28672, 4096}}) {
    SCOPED_TRACE(fmt::format("{} {}x{}", scheme, n, k));
    const tuning::Match m = tuning::tuning_store()->lookup(gpu, key(scheme, n, k));
    ASSERT_FALSE(m.entries.empty());
    EXPECT_TRUE(m.similar);
    EXPECT_EQ(m.entries.front()->origin, "tuning/nvidia-h100.json (shipped)");
  }
  gpu.name = "NVIDIA H100 80GB HBM3";
  const tuning::Match h100 = tuning::tuning_store()->lookup(gpu, key("nvfp4-w4a4", 4096, 4096));
  EXPECT_FALSE(h100.similar);
  EXPECT_EQ(buckets(h100), (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(h100.entries.front()->origin, "tuning/nvidia-h100.json (shipped)");
}

// The program-cache debug lines of moe_mma.cl naming `part`.
std::vector<std::string> mma_programs(const test::LogCapture& log, const std::string& part) {
  std::vector<std::string> out;
  for (const std::string& m : log.at(log::Level::debug))
    if (m.find("program moe_mma.cl") != std::string::npos && m.find(part) != std::string::npos) out.push_back(m);
  return out;
}

TEST_F(TunedMma, TunedMmaParametersReachTheKernelBuildOptions) {
  // Bucket 1: few pairs (2 < 5/16 · 16 · 4); bucket 32: many (64 pairs, tile_m 16: 64 >= 5 · 4).
  // Each serves its own counts (bucket 1 up to floor(sqrt(32)) = 5 tokens) with its own tiles;
  // they differ in the few-pairs K split (and bucket 1 gives no stage: the built-in 0).
  use_entries({entry(1, "mma", {{"tile_m", 16}, {"local_i", 64}, {"local_h", 128}, {"split_k", 2},
                                {"few_split_k", 2}, {"unroll", 2}}),
               entry(32, "mma", {{"tile_m", 16}, {"local_i", 64}, {"local_h", 128}, {"split_k", 2},
                                 {"few_split_k", 1}, {"unroll", 2}, {"stage", 1}})});
  const MoeSelection sel = select("mma");
  ASSERT_EQ(sel.usable.size(), 2u);
  const MoeTiles& small = sel.usable[0].tiles;
  EXPECT_EQ(sel.usable[0].max_pairs, 5 * kK);
  EXPECT_EQ(small.few_split_k, 2);
  EXPECT_EQ(small.stage, 0);
  const MoeTiles& t = sel.usable[1].tiles;
  EXPECT_EQ(sel.usable[1].max_pairs, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(t.tile_m, 16);
  EXPECT_EQ(t.local_i, 64);
  EXPECT_EQ(t.local_h, 128);
  EXPECT_EQ(t.split_k, 2);
  EXPECT_EQ(t.few_split_k, 1);
  EXPECT_EQ(t.unroll, 2);
  EXPECT_EQ(t.stage, 1);
  EXPECT_EQ(&sel.for_tokens(5, kK), &sel.usable[0]);
  EXPECT_EQ(&sel.for_tokens(6, kK), &sel.usable[1]);
  EXPECT_EQ(sel.decode_max_pairs, 0);  // decode won no bucket
  // One set of tiles (batch invariance): the many-pairs tiles of the largest bucket, the
  // few-pairs ones of the smallest (`unroll` and the origin as given).
  const auto expect_one_set = [&](int unroll, const std::string& origin) {
    cl_uint width = 1;
    test::test_context().device().getInfo(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &width);
    const MoeSelection one =
        select_moe_strategies(test::test_context().info(), width, {kScheme, kH, kI, kE, kK}, "mma", true);
    ASSERT_EQ(one.usable.size(), 1u);
    EXPECT_EQ(one.usable[0].tiles.unroll, unroll);
    EXPECT_EQ(one.usable[0].tiles.few_split_k, 2);
    EXPECT_EQ(one.usable[0].tiles.stage, 1);
    EXPECT_EQ(one.usable[0].origin, origin);
  };
  expect_one_set(2, "tuned (" + path_ + ")");
  // An mma key in FP4CL_MOE_TILES: each bucket's tiles still serve its counts, with the variable's
  // values over them (until 2026-11-29 the layer then took one set, the largest bucket's
  // many-pairs tiles and the smallest's few-pairs ones, for every count); with one set, the
  // variable's values over it.
  {
    const test::ScopedEnv env_tiles("FP4CL_MOE_TILES", "mma.unroll=1");
    const MoeSelection from_env = select("mma");
    ASSERT_EQ(from_env.usable.size(), 2u);
    EXPECT_EQ(from_env.usable[0].max_pairs, 5 * kK);
    EXPECT_EQ(from_env.usable[0].tiles.unroll, 1);
    EXPECT_EQ(from_env.usable[1].tiles.unroll, 1);
    EXPECT_EQ(from_env.usable[0].tiles.few_split_k, 2);
    EXPECT_EQ(from_env.usable[1].tiles.few_split_k, 1);
    EXPECT_EQ(from_env.usable[0].tiles.stage, 0);
    EXPECT_EQ(from_env.usable[1].tiles.stage, 1);
    EXPECT_EQ(from_env.usable[0].origin, "FP4CL_MOE_TILES over tuned bucket 1 (" + path_ + ")");
    EXPECT_EQ(from_env.usable[1].origin, "FP4CL_MOE_TILES over tuned bucket 32 (" + path_ + ")");
    expect_one_set(1, "FP4CL_MOE_TILES over tuned (" + path_ + ")");
  }
  // A value of FP4CL_MOE_TILES that sets what the buckets give too (mma.few_split_k) wins in each.
  {
    const test::ScopedEnv env_tiles("FP4CL_MOE_TILES", "mma.few_split_k=4");
    const MoeSelection from_env = select("mma");
    ASSERT_EQ(from_env.usable.size(), 2u);
    EXPECT_EQ(from_env.usable[0].tiles.few_split_k, 4);
    EXPECT_EQ(from_env.usable[1].tiles.few_split_k, 4);
    EXPECT_EQ(from_env.usable[1].tiles.stage, 1);
  }
  // The kernels: many pairs FC1 K = H = 128 split over 2 warps, 1 row tile (64 / 32 / 2); FC2
  // K = I = 64 (one chunk: no split), 2 row tiles (128 / 32 / 2), staged for bucket 32 (stage 1);
  // few pairs: FC1 K split 2 (bucket 1's few_split_k) and 1 (bucket 32's), FC2 1; unroll 2
  // everywhere.
  test::LogCapture log;
  const Fp4Experts ex = test::make_experts({kScheme.weight, kE, kH, kI, test::Data::exact, 70});
  MoeConfig cfg;
  cfg.scheme = kScheme;
  cfg.top_k = kK;
  cfg.max_tokens = 32;
  cfg.kernel = "mma";
  MoeLayer layer = MoeLayer::create(test::test_context(), ex, cfg);
  const auto many_fc1 = mma_programs(log, "-DMMA_NT=2");
  ASSERT_FALSE(many_fc1.empty()) << "no moe_mma.cl program with MMA_NT=2 (tile_m 16)";
  bool fc1 = false, fc2 = false, fc2_staged = false, few_fc1_split = false, few_fc1_whole = false;
  for (const std::string& m : many_fc1) {
    EXPECT_NE(m.find("-DMMA_UNROLL=2"), std::string::npos) << m;
    if (m.find("-DMMA_FC1=") != std::string::npos) {
      fc1 = true;
      EXPECT_NE(m.find("-DMMA_KSPLIT=2"), std::string::npos) << m;
      EXPECT_NE(m.find("-DMMA_RT=1"), std::string::npos) << m;
    }
    if (m.find("-DMMA_FC2=") != std::string::npos) {
      fc2 = true;
      EXPECT_NE(m.find("-DMMA_KSPLIT=1"), std::string::npos) << m;
      EXPECT_NE(m.find("-DMMA_RT=2"), std::string::npos) << m;
      fc2_staged |= m.find("-DMMA_STAGE=1") != std::string::npos;  // bucket 32's (bucket 1's: 0)
    }
  }
  EXPECT_TRUE(fc1 && fc2 && fc2_staged);
  for (const std::string& m : mma_programs(log, "-DMMA_NT=1")) {
    EXPECT_NE(m.find("-DMMA_UNROLL=2"), std::string::npos) << m;
    if (m.find("-DMMA_FC1=") != std::string::npos && m.find("MMA_PER_PAIR") == std::string::npos) {
      few_fc1_split |= m.find("-DMMA_KSPLIT=2") != std::string::npos;
      few_fc1_whole |= m.find("-DMMA_KSPLIT=1") != std::string::npos;
    }
  }
  EXPECT_TRUE(few_fc1_split) << "no few-pairs FC1 program with bucket 1's K split";
  EXPECT_TRUE(few_fc1_whole) << "no few-pairs FC1 program with bucket 32's K split";
  EXPECT_EQ(layer.tile_pairs_for(32), 16);
  EXPECT_EQ(layer.tile_pairs_for(1), 8);
  // The layer says which tiles serve a call and where they come from.
  EXPECT_EQ(layer.kernel_description(3), "mma: tile_m 16, local sizes 64 and 128, split_k 2, few_split_k 2, unroll 2, "
                                         "stage 0, warp_tiles 1 [tuned bucket 1 (" + path_ + ")]");
  expect_contains(layer.kernel_description(6), "few_split_k 1, unroll 2, stage 1, warp_tiles 1 [tuned bucket 32 (");
  // And the tuned kernels compute the layer: 3 tokens with bucket 1's, 8 (few pairs) and 32
  // (many) with bucket 32's.
  for (std::int64_t T : {std::int64_t{3}, std::int64_t{8}, std::int64_t{32}}) {
    const auto x = test::make_activations(T, kH, test::Data::exact, 71);
    const auto ids = test::make_ids(T, kK, kE, 72);
    const auto w = test::make_weights(T, kK, 73);
    const auto ref = reference::moe_reference(ex, test::reference_options(cfg), x,
                                              reference::routing_from_topk(ids, w, T, kK));
    EXPECT_TRUE(test::matches_reference(ref, test::run_topk(layer, cfg.output, x, ids, w, T), cfg.output))
        << "T = " << T;
  }
}

// A bucket whose tiles mma refuses on the device (work-groups of 64 with split_k 4: not a
// multiple of 32 · 4) leaves its counts to the next bucket, with a warning naming it; the largest
// bucket's to the built-in tiles.
TEST_F(TunedMma, ARefusedBucketLeavesItsCountsToTheNext) {
  const MoeTiles builtin = select("mma").usable.front().tiles;
  const tuning::Params refused = {{"tile_m", 16}, {"local_i", 64}, {"local_h", 64}, {"split_k", 4}};
  use_entries({entry(1, "mma", refused),
               entry(8, "mma", {{"tile_m", 16}, {"local_i", 64}, {"local_h", 128}, {"split_k", 2}, {"unroll", 2}}),
               entry(32, "mma", refused)});
  test::LogCapture log;
  const MoeSelection sel = select("mma");
  ASSERT_EQ(sel.usable.size(), 2u);
  EXPECT_EQ(sel.usable[0].tiles.local_h, 128);  // bucket 8's, serving up to floor(sqrt(8 · 32)) = 16 tokens
  EXPECT_EQ(sel.usable[0].max_pairs, 16 * kK);
  EXPECT_EQ(&sel.for_tokens(1, kK), &sel.usable[0]);  // bucket 1's counts
  EXPECT_TRUE(sel.usable[1].tiles == builtin);
  EXPECT_EQ(sel.usable[0].origin, "tuned bucket 8 (" + path_ + ")");
  EXPECT_EQ(sel.usable[1].origin, "built-in");
  EXPECT_EQ(&sel.for_tokens(17, kK), &sel.usable[1]);
  std::string warnings;
  for (const std::string& m : log.warnings()) warnings += m + "\n";
  expect_contains(warnings, "MoE strategy mma's bucket 1 cannot run");
  expect_contains(warnings, "the next bucket's serve its counts");
  expect_contains(warnings, "MoE strategy mma's bucket 32 cannot run");
  expect_contains(warnings, "the layer's one set of tiles serve its counts");
}

TEST_F(TunedMma, DecodeServesUpToTheFirstBucketMmaWon) {
  // Buckets 1 (decode) and 8 (mma) meet at 2 tokens; an automatic selection off NVIDIA does
  // not build mma, but the crossover is decode's.
  use_entries({entry(1, "decode", {{"tile_m", 1}, {"local_i", 4}, {"local_h", 2}}),
               entry(8, "mma", {{"tile_m", 32}, {"local_i", 128}, {"local_h", 256}, {"split_k", 0},
                                {"few_split_k", 4}, {"unroll", 1}, {"routed_row_tiles", 2},
                                {"routed_row_loop", 2}})});
  EXPECT_EQ(select("").decode_max_pairs, 2 * kK);
  const MoeSelection forced = select("mma");
  EXPECT_EQ(forced.usable.front().tiles.local_i, 128);
  EXPECT_EQ(forced.usable.front().tiles.split_k, 0);  // automatic
  EXPECT_EQ(forced.usable.front().tiles.few_split_k, 4);
  EXPECT_EQ(forced.usable.front().tiles.unroll, 1);
  EXPECT_EQ(forced.usable.front().tiles.routed_row_tiles, 2);
  EXPECT_EQ(forced.usable.front().tiles.routed_row_loop, 2);
}

// fc2_unroll from the database: FC2's programs load that many chunks ahead, FC1's unroll's.
TEST_F(TunedMma, Fc2UnrollFromTheDatabaseReachesTheFc2ProgramsAlone) {
  use_entries({entry(1, "mma", {{"tile_m", 16}, {"local_i", 64}, {"local_h", 128}, {"split_k", 2},
                                {"few_split_k", 2}, {"unroll", 2}, {"fc2_unroll", 4}})});
  const MoeSelection sel = select("mma");
  ASSERT_FALSE(sel.usable.empty());
  EXPECT_EQ(sel.usable.front().tiles.unroll, 2);
  EXPECT_EQ(sel.usable.front().tiles.fc2_unroll, 4);
  test::LogCapture log;
  const MoeLayer layer = mma_layer(4, 71);
  int fc1 = 0, fc2 = 0;
  for (const std::string& m : mma_programs(log, "-DMMA_UNROLL=")) {
    const bool is_fc2 = m.find("-DMMA_FC2=") != std::string::npos;
    (is_fc2 ? fc2 : fc1) += 1;
    EXPECT_NE(m.find(is_fc2 ? "-DMMA_UNROLL=4" : "-DMMA_UNROLL=2"), std::string::npos) << m;
  }
  EXPECT_GT(fc1, 0);
  EXPECT_GT(fc2, 0);
}

TEST_F(TunedMma, InvalidMmaValuesFallBackToTheBuiltInTilesWithAWarning) {
  const MoeTiles builtin = select("mma").usable.front().tiles;
  const tuning::Params good = {{"tile_m", 16}, {"local_i", 64}, {"local_h", 64}, {"split_k", 1},
                               {"few_split_k", 0}, {"unroll", 2}};
  struct Case {
    const char* key;
    long long value;
    const char* kernel;
    const char* warning;
  };
  const Case cases[] = {
      {"tile_m", 4, "mma", "MoE parameter tile_m = 4 of strategy mma"},
      {"unroll", 3, "mma", "MoE parameter unroll = 3 of strategy mma"},
      {"fc2_unroll", 3, "mma", "MoE parameter fc2_unroll = 3 of strategy mma"},
      {"stage", 2, "mma", "MoE parameter stage = 2 of strategy mma"},
      {"warp_tiles", 3, "mma", "MoE parameter warp_tiles = 3 of strategy mma"},
      {"routed_row_tiles", 3, "mma", "MoE parameter routed_row_tiles = 3 of strategy mma"},
      {"routed_row_loop", 3, "mma", "MoE parameter routed_row_loop = 3 of strategy mma"},
      {"token_fc2_warp_tiles", 3, "mma", "MoE parameter token_fc2_warp_tiles = 3 of strategy mma"},
      {"split_k", -1, "mma", "MoE parameter split_k = -1 of strategy mma"},
      {"few_split_k", 65, "mma", "MoE parameter few_split_k = 65 of strategy mma"},
      {"local_h", 0, "mma", "MoE parameter local_h = 0 of strategy mma"},
      {"split_k", 2, "grouped", "MoE parameter split_k = 2 of strategy grouped"},  // not a grouped key
      {"wavefront", 1, "mma", "MoE parameter wavefront = 1 of strategy mma"},
  };
  for (const Case& c : cases) {
    tuning::Params p = good;
    p[c.key] = c.value;
    if (std::string(c.kernel) == "grouped") p = {{"tile_m", 2}, {"local_i", 2}, {"local_h", 2}, {c.key, c.value}};
    test::LogCapture log;
    use_entries({entry(32, c.kernel, p)});
    const MoeSelection sel = select("mma");
    const MoeTiles& t = sel.usable.front().tiles;
    EXPECT_EQ(t.tile_m, builtin.tile_m) << c.key;
    EXPECT_EQ(t.unroll, builtin.unroll) << c.key;
    EXPECT_EQ(t.local_i, builtin.local_i) << c.key;
    bool warned = false;
    for (const std::string& m : log.warnings()) warned |= m.find(c.warning) != std::string::npos;
    EXPECT_TRUE(warned) << c.warning;
  }
  // Valid values the strategy refuses for this layer (work-groups of 64 with split_k 4: not a
  // multiple of 32 · 4): the built-in tiles, with a warning naming the reason; the other
  // strategies' tuned values are kept.
  tuning::Params refused = good;
  refused["split_k"] = 4;
  test::LogCapture log;
  use_entries({entry(32, "mma", refused)});
  const MoeTiles t = select("mma").usable.front().tiles;
  EXPECT_EQ(t.tile_m, builtin.tile_m);
  EXPECT_EQ(t.split_k, builtin.split_k);
  ASSERT_FALSE(log.warnings().empty());
  expect_contains(log.warnings().back(), "tuned tiles of MoE strategy mma");
  expect_contains(log.warnings().back(), "must be multiples of 32 · split_k = 128");
  expect_contains(log.warnings().back(), "built-in tiles used");
  // FP4CL_MOE_TILES naming a refused value is still an error (the user asked for it).
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", std::string("mma.split_k=4,mma.local_i=64,mma.local_h=64"));
  EXPECT_THROW(select("mma"), Error);
}

}  // namespace
}  // namespace fp4cl
