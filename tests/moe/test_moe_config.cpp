// Layer creation: validation of experts and configuration, strategy selection, output types,
// the calibrated FC2 input scale, buffer checks and gate/up scale sensitivity.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moe_test_support.hpp"
#include "kernels/cpu_denormal_speed.hpp"
#include "kernels/moe_build_options.hpp"
#include "kernels/moe_registry.hpp"
#include "common/formats.cl"
#include "reference/linear_reference.hpp"
#include "support/check.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};
const QuantScheme kMxW4A16{WeightFormat::mxfp4, Activations::bf16};
const QuantScheme kMxW4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};

MoeConfig config(const QuantScheme& scheme, int top_k) {
  MoeConfig c;
  c.scheme = scheme;
  c.top_k = top_k;
  return c;
}

// Creating the layer throws fp4cl::Error whose message contains `expected`.
void expect_create_error(const Fp4Experts& ex, const MoeConfig& cfg, const std::string& expected) {
  try {
    MoeLayer::create(test_context(), ex, cfg);
    ADD_FAILURE() << "no error; expected one mentioning: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// Activations [T, H] (seed `seed`) whose chunks of `chunk` elements are, by chunk index c: one
// element at 2^20 and the others near 2^-40 (c % 3 == 1), zeros (else c % 5 == 2), and with
// `near_ties`, where c % 3 == 0, the largest at 1.xxx and the others 2^6 .. 2^9 below it with every
// significand; ordinary BF16 elsewhere. The CPU paths that scale or round each chunk by its largest
// (scaled activations, integer planes) meet wide chunks, zero chunks and rounding ties in them.
std::vector<std::uint16_t> wide_chunk_activations(std::int64_t T, std::int64_t H, std::int64_t chunk,
                                                  std::uint64_t seed, bool near_ties) {
  std::vector<std::uint16_t> x = make_activations(T, H, Data::exact, seed);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < H; ++i) {
      std::uint16_t& v = x[static_cast<std::size_t>(t * H + i)];
      const std::int64_t c = i / chunk, j = i % chunk;
      if (c % 3 == 1) {  // one element at 2^20, the others near 2^-40
        const unsigned exponent = j == 5 ? 127u + 20u : 127u - 40u;
        v = static_cast<std::uint16_t>((v & 0x807Fu) | (exponent << 7));
      } else if (c % 5 == 2) {
        v = 0;
      } else if (near_ties && c % 3 == 0) {  // largest 1.xxx (j = 0), the others 2^6 .. 2^9 below
        const unsigned exponent = j == 0 ? 127u : 121u - static_cast<unsigned>(j % 4);
        v = static_cast<std::uint16_t>(((static_cast<unsigned>(i * 37 + t * 11) & 0x807Fu)) | (exponent << 7));
      }
    }
  return x;
}

// One token of BF16 denormals (seed `seed`) and the experts with FC1's global scales raised by
// 2^110, which lift its sums into the normal range: a path that flushed the denormals would give
// (nearly) all-zero outputs (count them with nonzero_outputs).
struct DenormalToken {
  Fp4Experts lifted;
  std::vector<std::uint16_t> x;
};
DenormalToken denormal_token(const Fp4Experts& ex, std::int64_t H, std::uint64_t seed) {
  DenormalToken d{ex, make_activations(1, H, Data::exact, seed)};
  for (float& g : d.lifted.w13_global_scale) g = std::ldexp(g, 110);
  for (std::uint16_t& v : d.x) v = static_cast<std::uint16_t>((v & 0x807Fu) | 1u);
  return d;
}
int nonzero_outputs(const DeviceResult& r, MoeOutput output, std::int64_t H) {
  int n = 0;
  for (std::int64_t i = 0; i < H; ++i) {
    const auto k = static_cast<std::size_t>(i);
    n += output == MoeOutput::fp32 ? r.fp32[k] != 0.0f : (r.bf16[k] & 0x7FFF) != 0;
  }
  return n;
}

TEST(MoeConfig, RejectsInvalidExperts) {
  const Fp4Experts good = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 1});
  const MoeConfig cfg = config(kNvW4A4, 2);
  const std::vector<std::pair<std::function<void(Fp4Experts&)>, std::string>> cases = {
      {[](Fp4Experts& e) { e.format = WeightFormat::mxfp4; }, "the experts are MXFP4 but the scheme is NVFP4 W4A4"},
      {[](Fp4Experts& e) { e.hidden = 72; }, "hidden = 72 must be a positive multiple of the NVFP4 block size 16"},
      {[](Fp4Experts& e) { e.w13_packed.pop_back(); }, "w13_packed has"},
      {[](Fp4Experts& e) { e.w2_scales.push_back(0x38); }, "w2_scales has"},
      {[](Fp4Experts& e) { e.w13_scales[(64 / 16) * 5 + 3] = 0x7F; }, "w13_scales[0, 5, 3] = 0x7F is a NaN E4M3 block scale"},
      {[](Fp4Experts& e) { e.w13_global_scale[3] = 0.0f; }, "w13_global_scale[3] = 0: a global scale must be finite and > 0"},
      {[](Fp4Experts& e) { e.w2_global_scale[1] = NAN; }, "w2_global_scale[1] = nan"},
      {[](Fp4Experts& e) { e.w13_input_global_scale.clear(); }, "w13_input_global_scale has 0 elements, expected 4"},
      {[](Fp4Experts& e) { e.w13_input_scale.clear(); }, "w13_input_scale has 0 elements, expected 4"},
      {[](Fp4Experts& e) { e.w13_input_scale[2] = INFINITY; }, "w13_input_scale[2] = inf"},
      // One direction set without the other: not reciprocals.
      {[](Fp4Experts& e) { e.w13_input_global_scale[1] *= 2.0f; }, "expert 1's w13: input_scale ="},
  };
  for (const auto& [mutate, message] : cases) {
    Fp4Experts ex = good;
    mutate(ex);
    expect_create_error(ex, cfg, message);
  }
  Fp4Experts mx = make_experts({WeightFormat::mxfp4, 4, 64, 32, Data::exact, 2});
  mx.w2_global_scale[0] = 0.5f;
  expect_create_error(mx, config({WeightFormat::mxfp4, Activations::bf16}, 2), "MXFP4 has no global scale");
}

TEST(MoeConfig, RejectsInvalidConfiguration) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 3});
  MoeConfig cfg = config(kNvW4A16, 0);
  expect_create_error(ex, cfg, "top_k = 0 must be in [1, 4]");
  cfg.top_k = 5;
  expect_create_error(ex, cfg, "top_k = 5 must be in [1, 4]");
  cfg.top_k = 2;
  cfg.max_tokens = 0;
  expect_create_error(ex, cfg, "max_tokens = 0 must be at least 1");
  cfg.max_tokens = 16;
  cfg.expert_map = {0, 1, -1, 4, 2};
  expect_create_error(ex, cfg, "expert_map[3] = 4: expected -1 or a local expert id in [0, 4)");
  cfg.expert_map = {0, 1, -1, 1, 2};
  expect_create_error(ex, cfg, "expert_map[1] and expert_map[3] both name local expert 1");
  cfg.expert_map.clear();
  cfg.fc2_input_scale = MoeFc2InputScale::calibrated;
  expect_create_error(ex, cfg, "a calibrated FC2 input scale applies to NVFP4 W4A4 only");
}

// W4A16 never reads activation scales, even where a mixed checkpoint carries broken ones.
TEST(MoeConfig, W4A16IgnoresActivationScales) {
  Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 4});
  ex.w13_input_global_scale.assign(4, NAN);
  ex.w13_input_scale.assign(4, 0.0f);
  ex.w2_input_global_scale.clear();
  ex.w2_input_scale.clear();
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "decode";
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto x = make_activations(3, 64, Data::exact, 5);
  const auto ids = make_ids(3, 2, 4, 6);
  const auto w = make_weights(3, 2, 7);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, 3, 2));
  EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, 3), cfg.output));
}

TEST(MoeConfig, UnknownStrategyListsTheValidOnes) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 8});
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "fastest";
  expect_create_error(ex, cfg, "unknown MoE kernel strategy 'fastest' (MoeConfig::kernel); valid: grouped, decode, split");
  cfg.kernel.clear();
  ScopedEnv env("FP4CL_MOE_KERNEL", "marlin");
  expect_create_error(ex, cfg, "unknown MoE kernel strategy 'marlin' (FP4CL_MOE_KERNEL); valid: grouped, decode, split");
}

TEST(MoeConfig, EnvironmentForcesAStrategy) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 9});
  ScopedEnv env("FP4CL_MOE_KERNEL", "decode");
  MoeLayer layer = MoeLayer::create(test_context(), ex, config(kNvW4A16, 2));
  EXPECT_EQ(layer.strategy_for(1), "decode");
  EXPECT_EQ(layer.strategy_for(200), "decode");
}

// The weight layouts are prepared on FP4CL_HOST_THREADS threads where a layer is large enough (at
// least 1 MiB of codes a thread; here 3 ranges of experts in the interleaved layout of the
// strategy PoCL picks): the same output bits as one thread, within the reference's bound. (The
// split and MMA layouts' threads have tests of their own, bit for bit against one thread:
// LinearGemvSplit, MmaLayout; forcing their strategies here took this test from 9 to 26 s with
// empty program caches.)
TEST(MoeConfig, HostThreadsPrepareTheSameLayer) {
  const std::int64_t E = 12, H = 1024, I = 512, T = 3;  // 256 KiB of codes an expert a matrix
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 77});
  const auto x = make_activations(T, H, Data::exact, 78);
  const auto ids = make_ids(T, 4, E, 79);
  const auto w = make_weights(T, 4, 80);
  const MoeConfig cfg = config(kNvW4A16, 4);
  std::vector<DeviceResult> runs;
  for (const char* threads : {"1", "3"}) {
    const ScopedEnv env("FP4CL_HOST_THREADS", threads);
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    if (test_context().info().kind == DeviceKind::cpu) {  // the interleaved layout's strategies
      const std::string strategy = layer.strategy_for(T);
      EXPECT_TRUE(strategy == "decode" || strategy == "grouped") << strategy;
    }
    runs.push_back(run_topk(layer, cfg.output, x, ids, w, T));
  }
  EXPECT_EQ(runs[1].bf16, runs[0].bf16);
  EXPECT_TRUE(matches_reference(
      reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, cfg.top_k)),
      runs[1], cfg.output));
}

TEST(MoeConfig, AutomaticSelectionByBatchSize) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 16, 64, 32, Data::exact, 10});
  MoeLayer layer = MoeLayer::create(test_context(), ex, config(kNvW4A16, 8));
  const bool cpu = test_context().info().kind == DeviceKind::cpu;  // GPUs take split for few pairs
  EXPECT_EQ(layer.strategy_for(1), cpu ? "decode" : "split");
  EXPECT_EQ(layer.strategy_for(256), "grouped");
  EXPECT_EQ(moe_kernel_strategies(), (std::vector<std::string>{"grouped", "decode", "split", "mma"}));
}

// The split strategy joins the automatic choice on a CPU only when split_max_pairs asks for it:
// split up to split_max_pairs, then decode, then grouped.
TEST(MoeConfig, SplitJoinsTheAutomaticSelectionWhenAskedFor) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 16, 64, 32, Data::exact, 10});
  if (test_context().info().kind == DeviceKind::cpu) {
    MoeLayer plain = MoeLayer::create(test_context(), ex, config(kNvW4A16, 8));
    EXPECT_NE(plain.strategy_for(1), "split");
  }
  ScopedEnv env("FP4CL_MOE_TILES", "split_max_pairs=16,decode_max_pairs=64");
  MoeLayer layer = MoeLayer::create(test_context(), ex, config(kNvW4A16, 8));
  EXPECT_EQ(layer.strategy_for(2), "split");
  EXPECT_EQ(layer.strategy_for(3), "decode");
  EXPECT_EQ(layer.strategy_for(8), "decode");
  EXPECT_EQ(layer.strategy_for(9), "grouped");
  // Each serves its own token counts correctly in one layer (both weight layouts uploaded).
  for (std::int64_t T : {std::int64_t{2}, std::int64_t{9}}) {
    const auto x = make_activations(T, 64, Data::exact, 40 + T);
    const auto ids = make_ids(T, 8, 16, 41 + T);
    const auto w = make_weights(T, 8, 42 + T);
    MoeConfig cfg = config(kNvW4A16, 8);
    const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, T);
    EXPECT_TRUE(matches_reference(reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, cfg.top_k)), dev, cfg.output)) << T;
    EXPECT_EQ(dev.call.chunk_strategies.front(), T == 2 ? "split" : "grouped");
  }
}

// The split strategy's GPU configuration (256-wide work-groups, 32 lanes per row, several rows
// per lane group) and its other geometries, run on whatever device the tests use.
TEST(MoeConfig, SplitGeometriesMatchReference) {
  struct Case {
    QuantScheme scheme;
    std::int64_t H, I;
    int top_k;
    const char* tiles;
  };
  const Case cases[] = {
      {kNvW4A4, 1024, 96, 3, "split.local_i=256,split.local_h=256"},                // 32 lanes, 2 rows per group
      {kNvW4A16, 1024, 1024, 2, "split.local_i=256,split.local_h=64,split.tile_m=4"},  // 32 lanes, 4 rows
      {QuantScheme{WeightFormat::mxfp4, Activations::fp4_dynamic}, 256, 64, 5,
       "split.local_i=32,split.local_h=8,split.tile_m=8"},  // FC2: fewer slot lanes than k
      // One lane per row (H = 96): a work-group of 32 covers 128 rows, more than its work-items
      // (once left 96 of them unwritten on the H100's defaults).
      {kNvW4A16, 96, 160, 4, "split.local_i=32,split.tile_m=4"},
      {kNvW4A4, 96, 160, 4, "split.local_i=32,split.tile_m=4"},
  };
  for (const Case& c : cases) {
    ScopedEnv env("FP4CL_MOE_TILES", c.tiles);
    const std::int64_t T = 3, E = 6;
    const Fp4Experts ex = make_experts({c.scheme.weight, E, c.H, c.I, Data::exact, 50});
    const auto x = make_activations(T, c.H, Data::exact, 51);
    const auto ids = make_ids(T, c.top_k, E, 52);
    const auto w = make_weights(T, c.top_k, 53);
    MoeConfig cfg = config(c.scheme, c.top_k);
    cfg.kernel = "split";
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, cfg.top_k));
    EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output)) << c.tiles;
  }
}

// The mma strategy's geometries other than the defaults (emulated MMAs off NVIDIA): weights
// loaded ahead (mma.unroll) with and without a remainder of the K slice, the K split over warps,
// several row tiles staging shared activations, for W4A16 (FC1 reading the input in place) and
// W4A4 (gathered, quantized), chunks of few pairs and of many. (On CPUs the default loads no
// chunks ahead, unroll 1: the first two cases are the suite's runs of the loads ahead, MXFP4 and
// NVFP4 scales.) One case a test: each builds its own emulated programs, which a cold program
// cache takes minutes to compile on a 2-core machine, so ctest runs them side by side.
struct MmaGeometryCase {
  QuantScheme scheme;
  std::int64_t T;
  const char* tiles;
};
// H = 192, I = 128: K slices of 3 and 2 chunks of 64.
const MmaGeometryCase kMmaGeometryCases[] = {
    {kMxW4A16, 3, "mma.unroll=2"},                    // FC1 2 + a remainder of 1, FC2 2
    {kNvW4A4, 3, "mma.unroll=4,mma.few_split_k=2"},   // remainder loops only; FC2 2 warps × 1 chunk
    {kNvW4A16, 40, "mma.tile_m=16,mma.local_i=64,mma.local_h=64,mma.stage=1"},  // many pairs: staged, 2 row tiles
    {kNvW4A4, 40, "mma.tile_m=16,mma.local_i=64,mma.local_h=64,mma.stage=1"},
    {kNvW4A16, 40, "mma.tile_m=16,mma.local_i=64,mma.local_h=64"},  // 2 row tiles, each warp reading x
    {kMxW4A4, 40, "mma.tile_m=32"},  // many pairs, the built-in tiles: FC1's 2 row tiles unstaged
    {kNvW4A4, 40, "mma.warp_tiles=2"},  // 2 row tiles a warp sharing each B fragment
    {kMxW4A16, 40, "mma.warp_tiles=2,mma.local_i=64,mma.local_h=64,mma.stage=1,mma.tile_m=16"},  // and staged
    {kNvW4A4, 1, "mma.row_loop=2"},  // one token: FC1's 2 blocks of 64 rows in one work-group
    {kMxW4A4, 1, "mma.row_loop=2"},
    {kMxW4A4, 3, "mma.unroll=2"},  // few pairs: FC1's 2 row tiles (a block of 32), unstaged
    {kNvW4A4, 1, "mma.unroll=1,mma.fc2_unroll=2"},  // one token: FC2 loads 2 chunks ahead, FC1 none
    {kMxW4A16, 3, "mma.unroll=2,mma.fc2_unroll=1"},  // few pairs: FC1 2 + a remainder of 1, FC2 none
};

void PrintTo(const MmaGeometryCase& c, std::ostream* os) { *os << c.scheme.name() << " T=" << c.T << " " << c.tiles; }

class MmaGeometries : public ::testing::TestWithParam<MmaGeometryCase> {};

TEST_P(MmaGeometries, MatchReference) {
  const MmaGeometryCase& c = GetParam();
  ScopedEnv env("FP4CL_MOE_TILES", c.tiles);
  const std::int64_t H = 192, I = 128, E = 4;
  const Fp4Experts ex = make_experts({c.scheme.weight, E, H, I, Data::exact, 54});
  const auto x = make_activations(c.T, H, Data::exact, 55);
  const auto ids = make_ids(c.T, 2, E, 56);
  const auto w = make_weights(c.T, 2, 57);
  MoeConfig cfg = config(c.scheme, 2);
  cfg.kernel = "mma";
  LogCapture log;
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, c.T, 2));
  EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, c.T), cfg.output))
      << c.scheme.name() << " T = " << c.T << " " << c.tiles;
  if (std::string(c.tiles) == "mma.row_loop=2") {  // the loop reached the one-token FC1's program
    EXPECT_TRUE(built_with(log, "moe_mma.cl", "-DMMA_ROW_LOOP=2")) << c.scheme.name();
  }
  if (std::string(c.tiles).find("mma.warp_tiles=2") != std::string::npos) {  // the many-pairs programs
    EXPECT_TRUE(built_with(log, "moe_mma.cl", "-DMMA_MT=2")) << c.scheme.name();
  }
  if (const char* f = std::strstr(c.tiles, "mma.fc2_unroll=")) {  // FC2's programs alone take it
    const std::string fc2 = fmt::format("-DMMA_UNROLL={}", f[15]);
    const std::string fc1 = fmt::format("-DMMA_UNROLL={}", std::strstr(c.tiles, "mma.unroll=")[11]);
    int programs = 0;
    for (const std::string& line : log.at(log::Level::debug)) {
      if (line.find("program moe_mma.cl") == std::string::npos) continue;
      ++programs;
      const bool is_fc2 = line.find("-DMMA_FC2=1") != std::string::npos;
      EXPECT_NE(line.find(is_fc2 ? fc2 : fc1), std::string::npos) << line;
    }
    EXPECT_GE(programs, 2);
  }
}

// "NVFP4_W4A4_T40_6": the scheme, the token count and the case's index.
std::string geometry_case_name(const ::testing::TestParamInfo<MmaGeometryCase>& p) {
  return std::string(p.param.scheme.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4") +
         (p.param.scheme.w4a16() ? "_W4A16" : "_W4A4") + "_T" + std::to_string(p.param.T) + "_" +
         std::to_string(p.index);
}

INSTANTIATE_TEST_SUITE_P(MoeConfig, MmaGeometries, ::testing::ValuesIn(kMmaGeometryCases), geometry_case_name);

// The mma geometries' rules: the one-token row loop, the automatic K split, the few-pairs and
// routed tiles, and refused values.
TEST(MoeConfig, MmaGeometryRules) {
  EXPECT_EQ(mma_pair_row_loop(224, 2, 132), 2);  // mixtral-8x7b on an H100: 224 work-groups
  EXPECT_EQ(mma_pair_row_loop(12, 8, 132), 1);   // qwen3-30b-a3b: 96 work-groups already
  EXPECT_EQ(mma_pair_row_loop(64, 2, 2), 8);
  EXPECT_EQ(mma_pair_row_loop(6, 2, 2), 2);      // 8 and 4 do not divide 6
  // The automatic K split: the fewest warps (a divisor of K / 64, at most 16 and leaving each 4
  // chunks) giving 4096 warps, else the most: qwen3-30b-a3b's FC1 8 (cap), FC2 3 (cap), mixtral's
  // 4 and 8, gpt-oss-20b's 9 (its 5 give 3600), a 4096 × 2880 linear layer 9 (cap 11 does not
  // divide 45 chunks: 1 before), K = 4608 (72 chunks) 12.
  EXPECT_EQ(mma_auto_split_k(2048, 768, 8), 8);
  EXPECT_EQ(mma_auto_split_k(768, 2048, 8), 3);
  EXPECT_EQ(mma_auto_split_k(4096, 14336, 2), 4);
  EXPECT_EQ(mma_auto_split_k(14336, 4096, 2), 8);
  EXPECT_EQ(mma_auto_split_k(2880, 2880, 4), 9);
  EXPECT_EQ(mma_auto_split_k(2880, 4096, 1), 9);
  EXPECT_EQ(mma_auto_split_k(4608, 4096, 1), 12);
  EXPECT_EQ(mma_auto_split_k(128, 64, 1), 1);
  // The one-token W4A4 FC1's row tiles, widest first, within the device's work-group maximum:
  // gpt-oss-20b's K split of 9 warps takes 2 on a device of 1024 (4 would be 1152 work-items, the
  // launch an H200 refused), qwen3-30b-a3b's 8 warps all three (4 is 1024 exactly).
  const QuantScheme nv_w4a4{WeightFormat::nvfp4, Activations::fp4_dynamic};
  const QuantScheme mx_w4a4{WeightFormat::mxfp4, Activations::fp4_dynamic};
  EXPECT_EQ(mma_pair_fc1_row_tiles({nv_w4a4, 2880, 2880, 32, 4}, 1, 9, 1024), (std::vector<int>{2, 1}));
  EXPECT_EQ(mma_pair_fc1_row_tiles({nv_w4a4, 2880, 2880, 32, 4}, 1, 9, 4096), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(mma_pair_fc1_row_tiles({nv_w4a4, 2048, 768, 128, 8}, 1, 8, 1024), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(mma_pair_fc1_row_tiles({nv_w4a4, 2048, 160, 128, 8}, 1, 2, 1024), (std::vector<int>{2, 1}));  // 64 ∤ 160
  EXPECT_EQ(mma_pair_fc1_row_tiles({mx_w4a4, 2880, 2880, 32, 4}, 2, 9, 1024), (std::vector<int>{2}));  // blocks of 32
  EXPECT_EQ(mma_pair_fc1_row_tiles({nv_w4a4, 2880, 2880, 32, 4}, 1, 16, 512), (std::vector<int>{1}));
  // Routed W4A4 chunks quantize in FC1 with tiles of 4 pairs at H = 2048 (16 KiB), 2 at 4096, none
  // past 16 KiB for 2 tokens, with fewer than 128 local experts or too little local memory.
  EXPECT_EQ(mma_routed_local_tile(2048, 128, 40000), 4);  // qwen3-30b-a3b
  EXPECT_EQ(mma_routed_local_tile(4096, 128, 40000), 2);  // qwen3-235b-a22b
  EXPECT_EQ(mma_routed_local_tile(7168, 256, 40000), 0);  // deepseek-v3
  EXPECT_EQ(mma_routed_local_tile(2048, 8, 40000), 0);    // mixtral-like expert count
  EXPECT_EQ(mma_routed_local_tile(2048, 127, 40000), 0);
  EXPECT_EQ(mma_routed_local_tile(2048, 128, 12000), 2);  // 4 tokens do not fit, 2 do
  EXPECT_EQ(mma_routed_local_tile(2048, 128, 8000), 0);
  // Their FC1 work-groups take 2 row tiles where 32 rows divide I and hold whole blocks.
  EXPECT_EQ(mma_routed_local_row_tiles(768, 16, 1), 2);   // qwen3-30b-a3b NVFP4
  EXPECT_EQ(mma_routed_local_row_tiles(2880, 32, 2), 2);  // gpt-oss MXFP4: already 2
  EXPECT_EQ(mma_routed_local_row_tiles(48, 16, 1), 1);    // 32 does not divide 48
  EXPECT_EQ(mma_routed_local_row_tiles(96, 64, 4), 4);    // never fewer than given
  // Routed chunks' FC2 takes a work-group a token where at most one pair in two has an expert to
  // itself and I is at most 24 chunks of 64: qwen3-30b-a3b up to 8 tokens, qwen3-235b-a22b, not
  // deepseek-v3 (I = 2048: level), gpt-oss-20b (I = 2880; and 8 tokens' 32 pairs over 32 experts)
  // or mixtral-8x7b.
  EXPECT_TRUE(mma_routed_token_fc2(64, 128, 768));
  EXPECT_TRUE(mma_routed_token_fc2(16, 128, 768));
  EXPECT_FALSE(mma_routed_token_fc2(65, 128, 768));
  EXPECT_TRUE(mma_routed_token_fc2(64, 128, 1536));
  EXPECT_FALSE(mma_routed_token_fc2(64, 128, 1600));
  EXPECT_FALSE(mma_routed_token_fc2(16, 256, 2048));
  EXPECT_FALSE(mma_routed_token_fc2(8, 32, 2880));
  EXPECT_FALSE(mma_routed_token_fc2(4, 8, 14336));
  // Chunks of several tokens split K over kMmaFewSplitK warps by default, one token keeps the
  // automatic split per GEMM (0); a configured few_split_k applies to both.
  const MoeProblem problem{kNvW4A16, 2048, 768, 128, 8};
  MoeTiles tiles;
  EXPECT_EQ(mma_few_pairs_tiles(tiles, problem).split_k, kMmaFewSplitK);
  EXPECT_EQ(mma_few_pairs_tiles(tiles, problem, true).split_k, 0);
  EXPECT_EQ(mma_few_pairs_tiles(tiles, problem).local_i, 32 * kMmaFewSplitK);
  tiles.few_split_k = 4;
  EXPECT_EQ(mma_few_pairs_tiles(tiles, problem).split_k, 4);
  EXPECT_EQ(mma_few_pairs_tiles(tiles, problem, true).split_k, 4);
  // Their geometry is never staged, even where MXFP4 W4A4's FC1 takes 2 row tiles (a block of 32
  // rows; gpt-oss-20b T = 8 on an H200: FC1 186 µs staged, 86 for NVFP4's one tile): staging
  // takes tiles that ask for it and several row tiles.
  const MoeProblem gpt_oss_mx{QuantScheme{WeightFormat::mxfp4, Activations::fp4_dynamic}, 2880, 2880, 32, 4};
  MoeTiles staged;
  staged.stage = 1;
  for (const bool one_token : {false, true}) {
    const MmaGeometry g = mma_geometry(mma_few_pairs_tiles(staged, gpt_oss_mx, one_token), gpt_oss_mx);
    EXPECT_EQ(g.fc1.rt, 2) << one_token;
    EXPECT_FALSE(g.fc1.stage || g.fc2.stage) << one_token;
  }
  staged.local_i = staged.local_h = 64;
  EXPECT_TRUE(mma_geometry(staged, gpt_oss_mx).fc1.stage);
  EXPECT_TRUE(mma_geometry(staged, gpt_oss_mx).fc2.stage);
  staged.stage = 0;
  EXPECT_FALSE(mma_geometry(staged, gpt_oss_mx).fc1.stage || mma_geometry(staged, gpt_oss_mx).fc2.stage);
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "mma";
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.unroll=3");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 58}), cfg,
                        "unroll = 3 must be 1, 2, 4 or 8");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.fc2_unroll=3");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 58}), cfg,
                        "fc2_unroll = 3 must be 0 (unroll's), 1, 2, 4 or 8");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_warp_tiles=3");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 58}), cfg,
                        "routed_warp_tiles = 3 must be 0 (automatic), 1, 2 or 4");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.token_fc2_warp_tiles=3");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 58}), cfg,
                        "token_fc2_warp_tiles = 3 must be 0 (automatic), 1, 2 or 4");
  }
  ScopedEnv env("FP4CL_MOE_TILES", "mma.row_loop=3");
  expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 58}), cfg,
                      "row_loop = 3 must be 0 (automatic), 1, 2, 4 or 8");
}

// A routed chunk: 8 tokens of top-8 over 128 experts (64 pairs, few per expert), H = 64, I = 128,
// under `scheme` with the mma strategy forced and fp32 outputs (seeds from `seed`), and its
// reference.
struct RoutedCase {
  static constexpr std::int64_t T = 8, E = 128, H = 64, I = 128;
  static constexpr int k = 8;
  Fp4Experts ex;
  std::vector<std::uint16_t> x;
  std::vector<std::int32_t> ids;
  std::vector<float> w;
  MoeConfig cfg;
  reference::MoeReferenceResult ref;
};
RoutedCase routed_case(const QuantScheme& scheme, std::uint64_t seed) {
  RoutedCase c{make_experts({scheme.weight, RoutedCase::E, RoutedCase::H, RoutedCase::I, Data::generic, seed}),
               make_activations(RoutedCase::T, RoutedCase::H, Data::generic, seed + 1),
               make_ids(RoutedCase::T, RoutedCase::k, RoutedCase::E, seed + 2),
               make_weights(RoutedCase::T, RoutedCase::k, seed + 3),
               config(scheme, RoutedCase::k),
               {}};
  c.cfg.kernel = "mma";
  c.cfg.output = MoeOutput::fp32;
  c.cfg.max_tokens = RoutedCase::T;
  c.ref = reference::moe_reference(c.ex, reference_options(c.cfg), c.x,
                                   reference::routing_from_topk(c.ids, c.w, RoutedCase::T, RoutedCase::k));
  return c;
}

// routed_case(scheme, seed) run once under each FP4CL_MOE_TILES setting of `settings`: every
// output matches the reference and has the first setting's bits; `check` (setting, layer, the
// layer's creation log) adds the setting's own expectations.
void expect_routed_settings_keep_the_bits(
    const QuantScheme& scheme, std::uint64_t seed, const std::vector<std::string>& settings,
    const std::function<void(const std::string&, const MoeLayer&, const LogCapture&)>& check) {
  const RoutedCase c = routed_case(scheme, seed);
  std::vector<float> first;
  for (const std::string& setting : settings) {
    SCOPED_TRACE(setting);
    ScopedEnv env("FP4CL_MOE_TILES", setting);
    LogCapture log;
    MoeLayer layer = MoeLayer::create(test_context(), c.ex, c.cfg);
    check(setting, layer, log);
    const DeviceResult out = run_topk(layer, c.cfg.output, c.x, c.ids, c.w, RoutedCase::T);
    EXPECT_TRUE(matches_reference(c.ref, out, c.cfg.output));
    if (first.empty()) first = out.fp32;
    ASSERT_EQ(out.fp32.size(), first.size());
    EXPECT_EQ(std::memcmp(out.fp32.data(), first.data(), first.size() * sizeof(float)), 0);
  }
}

// Routed W4A4 chunks (at least 128 local experts) whose FC1 quantizes its tiles' tokens: 1, 2 or
// 4 row tiles a warp in that FC1 (mma.routed_warp_tiles; automatic: 1) give the same bits, which
// match the reference, and each builds its program. Rows that do not divide I are refused with the
// reason.
TEST(MoeConfig, RoutedFc1RowTilesAWarpKeepTheBits) {
  const std::int64_t T = RoutedCase::T, E = RoutedCase::E, H = RoutedCase::H;
  for (const QuantScheme& scheme : {kNvW4A4, kMxW4A4}) {
    SCOPED_TRACE(scheme.name());
    expect_routed_settings_keep_the_bits(
        scheme, 71, {"mma.routed_warp_tiles=1", "mma.routed_warp_tiles=2", "mma.routed_warp_tiles=4"},
        [&](const std::string& setting, const MoeLayer& layer, const LogCapture& log) {
          EXPECT_EQ(layer.tile_pairs_for(T), 4) << "not the routed chunks whose FC1 quantizes";
          const char tiles = setting.back();
          EXPECT_EQ(built_with(log, "moe_mma.cl", std::string("-DMMA_MT=") + tiles), tiles != '1');
        });
  }
  MoeConfig cfg = config(kNvW4A4, 8);
  cfg.kernel = "mma";
  ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_warp_tiles=4");  // 2 row tiles of 16, 4 a warp: 128 rows
  expect_create_error(make_experts({WeightFormat::nvfp4, E, H, 64, Data::exact, 75}), cfg,
                      "routed_warp_tiles = 4: the routed FC1's work-groups of 128 rows do not divide I = 64");
}

// Routed chunks (8 tokens of top-8 over 128 experts: 64 pairs, few per expert) with 1, 2 or 4 row
// tiles of 16 a work-group in their FC1 (mma.routed_row_tiles; each warp still multiplies one row
// tile over its K slice) and 1, 2 or 4 blocks of those rows a work-group (mma.routed_row_loop:
// MMA_ROW_LOOP after one routing) give the same bits, which match the reference, under every
// scheme; the routed FC1 is built with those (automatic: 1 row tile under W4A16, 2 under W4A4,
// whose FC1 quantizes the tiles' tokens here; one block). MXFP4 W4A4's blocks of 32 rows refuse 1
// row tile, and blocks of rows that do not divide I are refused, with the reason, as are values
// outside the keys' sets.
TEST(MoeConfig, RoutedFc1RowTilesAndBlocksAWorkGroupKeepTheBits) {
  const std::int64_t E = RoutedCase::E, H = RoutedCase::H, I = RoutedCase::I;
  struct Setting {
    std::string tiles;
    int row_tiles, blocks;  // 0 row tiles: the scheme's automatic ones
  };
  const std::vector<Setting> settings = {{"mma.routed_row_tiles=1", 1, 1},
                                         {"mma.routed_row_tiles=2", 2, 1},
                                         {"mma.routed_row_tiles=4", 4, 1},
                                         {"mma.routed_row_loop=2", 0, 2},
                                         {"mma.routed_row_tiles=2,mma.routed_row_loop=2", 2, 2},
                                         {"mma.routed_row_tiles=2,mma.routed_row_loop=4", 2, 4}};
  for (const QuantScheme& scheme : {kNvW4A16, kMxW4A16, kNvW4A4, kMxW4A4}) {
    SCOPED_TRACE(scheme.name());
    std::vector<std::string> tiles;
    for (const Setting& setting : settings)
      if (scheme != kMxW4A4 || setting.row_tiles != 1) tiles.push_back(setting.tiles);  // 16 rows: not whole blocks of 32
    expect_routed_settings_keep_the_bits(
        scheme, 91, tiles, [&](const std::string& tiles_text, const MoeLayer&, const LogCapture& log) {
          const Setting& setting =
              *std::find_if(settings.begin(), settings.end(), [&](const Setting& s) { return s.tiles == tiles_text; });
          const int row_tiles = setting.row_tiles > 0 ? setting.row_tiles : scheme.w4a16() ? 1 : 2;
          std::vector<std::string> options = {"-DMMA_FC1=1", "-DMMA_ROUTED=1",
                                              "-DMMA_RT=" + std::to_string(row_tiles)};
          if (setting.blocks > 1) options.push_back("-DMMA_ROW_LOOP=" + std::to_string(setting.blocks));
          EXPECT_TRUE(built_with_all(log, "moe_mma.cl", options));
        });
  }
  MoeConfig cfg = config(kMxW4A4, 8);
  cfg.kernel = "mma";
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_row_tiles=1");
    expect_create_error(make_experts({WeightFormat::mxfp4, E, H, I, Data::exact, 95}), cfg,
                        "routed_row_tiles = 1: the routed FC1's work-groups of 16 rows must divide I = 128 and be "
                        "whole MXFP4 blocks of 32");
  }
  cfg = config(kNvW4A16, 8);
  cfg.kernel = "mma";
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_row_tiles=2,mma.routed_row_loop=8");  // 8 blocks of 32 rows
    expect_create_error(make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 96}), cfg,
                        "routed_row_loop = 8: 8 blocks of the routed FC1's 32 rows do not divide I = 128");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_row_loop=3");
    expect_create_error(make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 97}), cfg,
                        "routed_row_loop = 3 must be 0 (automatic), 1, 2, 4 or 8");
  }
  ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_row_tiles=3");
  expect_create_error(make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 97}), cfg,
                      "routed_row_tiles = 3 must be 0 (automatic), 1, 2 or 4");
}

// Routed chunks' FC2 with a work-group a token (mma.routed_fc2 2: MMA_TOKEN_SUM, no K split) and
// with a work-group a tile of pairs (1) each match the reference, also where some pairs' experts
// live on other ranks (pairs left out of the sum; tokens with none local give zero) and in chunks
// of fewer tokens, and give the same bits under batch invariance (the same K split, the same sums
// in the same order). Only 2 builds the program. The automatic choice builds it where
// mma_routed_token_fc2 takes one token's pairs (32 local experts, I = 128), not with 6 (2 · 4
// pairs > 6). routed_fc2 3 is refused.
TEST(MoeConfig, RoutedFc2AWorkGroupATokenMatchesTheReference) {
  const std::int64_t T = 5, E = 32, H = 64, I = 128;
  const int k = 4;
  // Both weight formats, both kinds of activations (W4A4's FC2 reads quantized rows).
  for (const QuantScheme& scheme : {kNvW4A4, kMxW4A16}) {
    SCOPED_TRACE(scheme.name());
    const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::generic, 81});
    const auto x = make_activations(T, H, Data::generic, 82);
    const auto w = make_weights(T, k, 84);
    for (const bool other_ranks : {false, true}) {
      // Other ranks: 64 global experts, the even ones local (local id g / 2).
      const auto ids = make_ids(T, k, other_ranks ? 2 * E : E, 83);
      for (const bool invariant : {false, true}) {
        SCOPED_TRACE(testing::Message() << "other ranks " << other_ranks << ", batch invariant " << invariant);
        MoeConfig cfg = config(scheme, k);
        cfg.kernel = "mma";
        cfg.output = MoeOutput::fp32;
        cfg.max_tokens = T;
        cfg.batch_invariant = invariant;
        if (other_ranks) {
          for (std::int32_t g = 0; g < 2 * E; ++g) cfg.expert_map.push_back(g % 2 == 0 ? g / 2 : -1);
        }
        const auto ref =
            reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, k));
        std::vector<float> by_tile;
        for (const int fc2 : {1, 2}) {
          ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_fc2=" + std::to_string(fc2));
          LogCapture log;
          MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
          const DeviceResult out = run_topk(layer, cfg.output, x, ids, w, T);
          EXPECT_TRUE(matches_reference(ref, out, cfg.output)) << fc2;
          EXPECT_EQ(built_with(log, "moe_mma.cl", "-DMMA_TOKEN_SUM=1"), fc2 == 2) << fc2;
          if (fc2 == 1) by_tile = out.fp32;
          ASSERT_EQ(out.fp32.size(), by_tile.size());
          if (invariant) {
            EXPECT_EQ(std::memcmp(out.fp32.data(), by_tile.data(), by_tile.size() * sizeof(float)), 0);
          }
        }
        // In chunks of 2, 2 and 1 tokens (token offsets 2 and 4; the last a one-token chunk).
        ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_fc2=2");
        MoeConfig chunked = cfg;
        chunked.max_tokens = 2;
        MoeLayer layer = MoeLayer::create(test_context(), ex, chunked);
        const DeviceResult out = run_topk(layer, cfg.output, x, ids, w, T);
        EXPECT_TRUE(matches_reference(ref, out, cfg.output)) << "chunks";
        ASSERT_EQ(out.fp32.size(), by_tile.size());
        if (invariant) {
          EXPECT_EQ(std::memcmp(out.fp32.data(), by_tile.data(), by_tile.size() * sizeof(float)), 0) << "chunks";
        }
      }
    }
  }
  MoeConfig cfg = config(kNvW4A4, k);  // the loop's first layers' options: their programs are built
  cfg.kernel = "mma";
  cfg.output = MoeOutput::fp32;
  cfg.max_tokens = T;
  for (const std::int64_t experts : {E, std::int64_t{6}}) {
    LogCapture log;
    MoeLayer::create(test_context(), make_experts({WeightFormat::nvfp4, experts, H, I, Data::exact, 85}), cfg);
    EXPECT_EQ(built_with(log, "moe_mma.cl", "-DMMA_TOKEN_SUM=1"), experts == E) << experts;
  }
  ScopedEnv env("FP4CL_MOE_TILES", "mma.routed_fc2=3");
  expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 86}), cfg,
                      "routed_fc2 = 3 must be 0 (automatic), 1 (a work-group a tile of pairs) or 2 (a work-group a token)");
}

// A routed chunk whose FC2 takes a work-group a token (automatic: 64 pairs over 128 local experts)
// with 1, 2 or 4 row tiles of 16 a warp in that FC2 (mma.token_fc2_warp_tiles; automatic: 1): the
// same bits (each row's sum over K in the same order), which match the reference, under both
// kinds of activations; the token FC2 is built with MMA_MT where it is more than 1.
TEST(MoeConfig, TokenFc2RowTilesAWarpKeepTheBits) {
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4}) {
    SCOPED_TRACE(scheme.name());
    expect_routed_settings_keep_the_bits(
        scheme, 91, {"mma.token_fc2_warp_tiles=1", "mma.token_fc2_warp_tiles=2", "mma.token_fc2_warp_tiles=4"},
        [&](const std::string& setting, const MoeLayer&, const LogCapture& log) {
          const char tiles = setting.back();
          EXPECT_TRUE(built_with_all(log, "moe_mma.cl", {"-DMMA_TOKEN_SUM=1"}));
          EXPECT_EQ(built_with_all(log, "moe_mma.cl", {"-DMMA_MT=" + std::string(1, tiles), "-DMMA_TOKEN_SUM=1"}),
                    tiles != '1');
        });
  }
}

// Where routed chunks take no FC2 of a work-group a token (mma.routed_fc2 1, or 6 local experts
// for a token's 4 pairs: mma_routed_token_fc2), mma.token_fc2_warp_tiles says at creation that it
// changes nothing, and why; the program is not built.
TEST(MoeConfig, TokenFc2RowTilesSayWhereTheyChangeNothing) {
  MoeConfig cfg = config(kNvW4A16, 4);
  cfg.kernel = "mma";
  cfg.max_tokens = 5;
  struct Case {
    std::int64_t experts;
    int warp_tiles;
    std::string other_tiles, why;
  };
  for (const Case& c : {Case{6, 2, "", "6 local experts for a token's 4 pairs and I = 128"},
                        Case{32, 4, ",mma.routed_fc2=1", "mma.routed_fc2 = 1"}}) {
    const std::string tiles = "mma.token_fc2_warp_tiles=" + std::to_string(c.warp_tiles) + c.other_tiles;
    SCOPED_TRACE(tiles);
    ScopedEnv env("FP4CL_MOE_TILES", tiles);
    LogCapture log;
    MoeLayer::create(test_context(), make_experts({WeightFormat::nvfp4, c.experts, 64, 128, Data::exact, 87}), cfg);
    bool said = false;
    for (const std::string& line : log.at(log::Level::info))
      said = said || (line.find(fmt::format("mma.token_fc2_warp_tiles = {} changes nothing", c.warp_tiles)) !=
                          std::string::npos &&
                      line.find(c.why) != std::string::npos);
    EXPECT_TRUE(said) << fmt::format("{}", fmt::join(log.at(log::Level::info), "\n"));
    EXPECT_FALSE(built_with(log, "moe_mma.cl", "-DMMA_TOKEN_SUM=1"));
  }
}

TEST(MoeConfig, SplitRefusalsNameTheReason) {
  MoeConfig cfg = config(kNvW4A4, 2);
  cfg.kernel = "split";
  // H not a multiple of 32.
  expect_create_error(make_experts({WeightFormat::nvfp4, 4, 48, 32, Data::exact, 60}), cfg,
                      "H = 48 and I = 32 must be multiples of 32");
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 61});
  {
    // 64 / 2 lanes = 32 lane groups × 1 row: fine; 8 work-items / 2 lanes = 4 rows: not a block.
    ScopedEnv env("FP4CL_MOE_TILES", "split.local_i=8,split.tile_m=1");
    expect_create_error(ex, cfg, "an FC1 work-group covers 4 rows, not a multiple of the NVFP4 block size 16");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "split.local_i=3");
    expect_create_error(ex, cfg, "the FC1 work-group of 3 is not a multiple of the 2 lanes per row of the split layout (K = H = 64)");
  }
  {
    // Fewer work-items than the layout's lanes per row (once computed with too few lanes:
    // wrong output, found by fp4cl-bench tune).
    ScopedEnv env("FP4CL_MOE_TILES", "split.local_i=1");
    expect_create_error(ex, cfg, "the FC1 work-group of 1 is not a multiple of the 2 lanes per row of the split layout (K = H = 64)");
  }
  {
    ScopedEnv env("FP4CL_MOE_TILES", "split.local_h=1");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 62}), cfg,
                        "the FC2 work-group of 1 is not a multiple of the 2 lanes per row of the split layout (K = I = 64)");
  }
}

// The E2M1 decode for devices that flush denormals, forced here on any device.
TEST(MoeConfig, ExactE2M1DecodeMatchesReference) {
  ScopedEnv env("FP4CL_MOE_E2M1_DECODE", "exact");
  const std::int64_t T = 5;
  for (const WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const Fp4Experts ex = make_experts({f, 8, 80 + (f == WeightFormat::mxfp4 ? 16 : 0), 64, Data::exact, 29});
    MoeConfig cfg = config({f, Activations::bf16}, 2);
    cfg.kernel = "decode";  // both strategies share the E2M1 decode: the smaller build suffices
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    const auto x = make_activations(T, ex.hidden, Data::exact, 30);
    const auto ids = make_ids(T, 2, 8, 31);
    const auto w = make_weights(T, 2, 32);
    const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
    EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output)) << to_string(f);
  }
  ScopedEnv bad("FP4CL_MOE_E2M1_DECODE", "lut");
  expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A16, 2),
                      "FP4CL_MOE_E2M1_DECODE = 'lut': expected 'exact' or 'subnormal'");
}

// The E2M1 decode to fp32 subnormals and the exact one multiply the same values in the same
// order: the same bits, so the default may pick either by speed (the exact one where this
// processor multiplies denormals slowly, kernels/cpu_denormal_speed.hpp; the subnormal trick
// elsewhere). (MXFP4 on 16-lane CPUs: with the exact decode its few-pair tiles sum each block
// unscaled, MOE_LUT, another order; on these data, BF16 activations against power-of-two scales
// at K = 128, both orders give the same bits, which the test requires too.) T = 16 over 8 experts with k = 2 gives grouped tiles of 1 to 8 pairs (those above 4
// take the float decode on CPUs, the rest the BF16 or integer dot products where they apply).
TEST(MoeConfig, E2M1DecodesGiveTheSameBitsAndTheDefaultFollowsTheDenormalSpeed) {
  if (!test_context().info().fp32_denormals) GTEST_SKIP() << "the device flushes fp32 denormals";
  const bool slow = cpu_fp32_denormals_slow(test_context().info());
  const std::int64_t T = 16;
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4, kMxW4A16}) {
    const Fp4Experts ex = make_experts({scheme.weight, 8, 128, 64, Data::generic, 41});
    const auto x = make_activations(T, ex.hidden, Data::generic, 42);
    const auto ids = make_ids(T, 2, 8, 43);
    const auto w = make_weights(T, 2, 44);
    for (const char* strategy : {"grouped", "decode"}) {
      MoeConfig cfg = config(scheme, 2);
      cfg.kernel = strategy;
      std::vector<std::uint16_t> out[3];
      const std::optional<std::string> choices[3] = {std::nullopt, "exact", "subnormal"};
      for (int c = 0; c < 3; ++c) {
        ScopedEnv env("FP4CL_MOE_E2M1_DECODE", choices[c]);
        LogCapture log;
        MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
        const bool exact = c == 0 ? slow : c == 1;
        EXPECT_EQ(built_with(log, "moe_fc1.cl", "MOE_E2M1_NO_DENORM"), exact)
            << scheme.name() << " " << strategy << " FP4CL_MOE_E2M1_DECODE=" << choices[c].value_or("(unset)");
        out[c] = run_topk(layer, cfg.output, x, ids, w, T).bf16;
        if (c == 0) {
          const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
          EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output))
              << scheme.name() << " " << strategy;
        }
      }
      EXPECT_EQ(out[1], out[2]) << scheme.name() << " " << strategy << ": exact and subnormal decodes differ";
      EXPECT_EQ(out[0], out[1]) << scheme.name() << " " << strategy << ": the default differs from both";
    }
  }
  // The mma kernels decode to subnormals only: they keep them however slow, and refuse the exact decode by name.
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "mma";
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 128, 64, Data::generic, 45});
  {
    LogCapture log;
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    EXPECT_TRUE(built_with(log, "moe_mma.cl", "-D")) << "no mma program was built";
    EXPECT_FALSE(built_with(log, "moe_mma.cl", "MOE_E2M1_NO_DENORM"));
  }
  ScopedEnv env("FP4CL_MOE_E2M1_DECODE", "exact");
  expect_create_error(ex, cfg, "FP4CL_MOE_E2M1_DECODE = exact (the MMA decode needs fp32 denormals)");
}

// The processor's denormal speed: both timings measured, the verdict the ratio's.
TEST(MoeConfig, DenormalSpeedProbe) {
  const DenormalSpeed& s = host_denormal_speed();
  EXPECT_GT(s.normal_ns, 0.0);
  EXPECT_GT(s.denormal_ns, 0.0);
  EXPECT_EQ(s.slow(), s.denormal_ns >= DenormalSpeed::kSlowRatio * s.normal_ns);
  EXPECT_EQ(&s, &host_denormal_speed()) << "measured once";
  DenormalSpeed intel{100.0, 3200.0}, zen{100.0, 104.0};
  EXPECT_TRUE(intel.slow());
  EXPECT_FALSE(zen.slow());
  EXPECT_FALSE(DenormalSpeed{}.slow());
  std::printf("denormal multiplies: %.0f ns against %.0f ns for normal ones (%.1fx)\n", s.denormal_ns, s.normal_ns,
              s.ratio());
}

// Tiles of up to 4 pairs by AVX-512 BF16 dot products (kernels/moe_fp4_vec.cl, MOE_BF16DOT) where the
// processor has them, and the table decode they replace (FP4CL_MOE_BF16_DOT=0), against the
// reference: K = 320 and 288 cover a partial packing chunk (256 elements), T = 1 only one-pair
// tiles, T = 5 and 16 over 8 experts with k = 2 tiles of 1 to 8 pairs; decode's FC2 always
// has one pair. MXFP4 takes the path where its decode is exact (the LUT's: on CPUs whose fp32
// denormals are slow, or with FP4CL_MOE_E2M1_DECODE=exact, forced here for one round so that
// every such CPU runs it) and keeps the table decode's float path otherwise.
TEST(MoeConfig, Bf16DotProductsMatchReference) {
  const bool available = [] {
    ScopedEnv unset("FP4CL_MOE_BF16_DOT", "");
    return moe_bf16_dot_enabled(test_context());
  }();
  {
    ScopedEnv bad("FP4CL_MOE_BF16_DOT", "yes");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A16, 2),
                        "FP4CL_MOE_BF16_DOT = 'yes': expected 0 (off) or 1");
  }
  if (!available) {
    ScopedEnv on("FP4CL_MOE_BF16_DOT", "1");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A16, 2),
                        "FP4CL_MOE_BF16_DOT = 1, but");
  }
  struct Case {
    QuantScheme scheme;
    const char* strategy;
    const char* bf16_dot;
    const char* e2m1_decode = "";  // FP4CL_MOE_E2M1_DECODE ("": the layer's own choice)
  };
  const QuantScheme mx_w4a16{WeightFormat::mxfp4, Activations::bf16}, mx_w4a4{WeightFormat::mxfp4,
                                                                            Activations::fp4_dynamic};
  std::vector<Case> cases = {{kNvW4A16, "grouped", "0"}, {kNvW4A4, "grouped", "0"}, {mx_w4a16, "grouped", "0", "exact"}};
  if (available) {
    for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4, mx_w4a16, mx_w4a4}) {
      cases.push_back({scheme, "grouped", "1"});
      cases.push_back({scheme, "decode", "1"});
    }
    for (const QuantScheme& scheme : {mx_w4a16, mx_w4a4})
      for (const char* strategy : {"grouped", "decode"}) cases.push_back({scheme, strategy, "1", "exact"});
  }
  for (const Case& c : cases) {
    ScopedEnv env("FP4CL_MOE_BF16_DOT", c.bf16_dot);
    ScopedEnv decode("FP4CL_MOE_E2M1_DECODE", c.e2m1_decode);
    const std::int64_t E = 8, H = 320, I = 288;
    const Fp4Experts ex = make_experts({c.scheme.weight, E, H, I, Data::exact, 41});
    MoeConfig cfg = config(c.scheme, 2);
    cfg.kernel = c.strategy;
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    for (const std::int64_t T : {1, 5, 16})
      EXPECT_TRUE(topk_matches_reference_twice(layer, ex, cfg, T, 42 + T))
          << c.scheme.name() << " " << c.strategy << " FP4CL_MOE_BF16_DOT=" << c.bf16_dot
          << " FP4CL_MOE_E2M1_DECODE=" << c.e2m1_decode << " T=" << T;
  }
  // Activations so small that vdpbf16ps would flush them or its sums (BF16 exponent fields 0 to 2:
  // token 0 all denormals, the others below 2^-124): those pairs fall back to the table decode, so
  // the result is IEEE fp32 arithmetic's. (The FC1 global scales are raised by 2^110 so that such
  // sums reach the output.)
  ScopedEnv env("FP4CL_MOE_BF16_DOT", available ? "1" : "0");
  const std::int64_t E = 8, H = 320, I = 288, T = 3;
  Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 51});
  for (float& g : ex.w13_global_scale) g = std::ldexp(g, 110);  // FC1 sums of such x visible in the output
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "grouped";
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  std::vector<std::uint16_t> x = make_activations(T, H, Data::exact, 52);
  for (std::int64_t i = 0; i < T * H; ++i) {
    const auto bits = static_cast<unsigned>(x[static_cast<std::size_t>(i)]);
    const unsigned exponent = i < H ? 0u : 1u + static_cast<unsigned>(i % 2);  // token 0: denormals
    x[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>((bits & 0x807Fu) | (exponent << 7) | (i < H ? 1u : 0u));
  }
  const auto ids = make_ids(T, 2, E, 53);
  const auto w = make_weights(T, 2, 54);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
  const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, T);
  EXPECT_TRUE(matches_reference(ref, dev, cfg.output)) << "tiny activations";
  // The reference's bound is loose at these magnitudes (about 0.03 for outputs near 1e-11), so
  // also: token 0's denormal activations were not flushed (flushed, its outputs would all be 0).
  EXPECT_GT(nonzero_outputs(dev, cfg.output, H), H / 2)
      << "token 0's outputs vanished: its denormal activations were flushed";
  // The same for MXFP4, whose tiny activations under W4A4 are quantized ones (E8M0 scales reach
  // 2^-127, so FC1 and FC2 scan them too), with its exact decode forced (the BF16 dot products
  // follow it); FC1's E8M0 scales raised by 2^100 instead of a global scale.
  ScopedEnv exact("FP4CL_MOE_E2M1_DECODE", "exact");
  Fp4Experts mx = make_experts({WeightFormat::mxfp4, E, H, I, Data::exact, 55});
  for (std::uint8_t& e : mx.w13_scales) e = static_cast<std::uint8_t>(std::min(254, e + 100));
  for (const QuantScheme& scheme : {QuantScheme{WeightFormat::mxfp4, Activations::bf16},
                                    QuantScheme{WeightFormat::mxfp4, Activations::fp4_dynamic}}) {
    MoeConfig mcfg = config(scheme, 2);
    mcfg.kernel = "grouped";
    MoeLayer mlayer = MoeLayer::create(test_context(), mx, mcfg);
    const auto mref =
        reference::moe_reference(mx, reference_options(mcfg), x, reference::routing_from_topk(ids, w, T, 2));
    const DeviceResult mdev = run_topk(mlayer, mcfg.output, x, ids, w, T);
    EXPECT_TRUE(matches_reference(mref, mdev, mcfg.output)) << scheme.name() << " tiny activations";
    EXPECT_GT(nonzero_outputs(mdev, mcfg.output, H), H / 2)
        << scheme.name() << ": token 0's outputs vanished: its denormal activations were flushed";
  }
}

// Prefill panels (kernels/moe_fp4_vec.cl, "Prefill panels": on CPU layouts an expert's run of
// several full tiles decodes its weights once per K slice) against the reference: 4 experts, k =
// 2 and T = 40 and 64, so that experts receive runs of several full tiles of 8 pairs and a partial
// one; K = 320 and 288 end in a partial panel slice (256 elements a slice). Deterministic on rerun.
TEST(MoeConfig, PrefillPanelsMatchReference) {
  const std::int64_t E = 4, H = 320, I = 288;
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4, QuantScheme{WeightFormat::mxfp4, Activations::bf16}}) {
    const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::exact, 71});
    MoeConfig cfg = config(scheme, 2);
    cfg.kernel = "grouped";
    cfg.max_tokens = 64;
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    for (const std::int64_t T : {40, 64})
      EXPECT_TRUE(topk_matches_reference_twice(layer, ex, cfg, T, 72 + T)) << scheme.name() << " T=" << T;
  }
}

// Tiles of up to 4 pairs by exact integer dot products (kernels/moe_int_dot.cl, MOE_INTDOT): NVFP4
// and MXFP4 W4A4 with the 8-lane layout (forced here, and the BF16 dot products off, so that any
// CPU runs it), against the reference, with the AVX2 builtins (where the OpenCL compiler has them),
// without them (FP4CL_MOE_INT_DOT=portable: the same bits) and off (the float decode); T = 1 only
// one-pair tiles, T = 5 and 16 over 8 experts with k = 2 tiles of 1 to 8 pairs (8: the float
// decode, in the same call); decode's FC2 always has one pair. K = 320 and 288: blocks of 16 (and
// of 32: MXFP4's, two steps of 16 under one scale) past any power of two.
TEST(MoeConfig, IntDotProductsMatchReference) {
  if (test_context().info().kind != DeviceKind::cpu) GTEST_SKIP() << "the integer dot products are for CPU devices";
  {
    ScopedEnv bad("FP4CL_MOE_INT_DOT", "yes");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A4, 2),
                        "FP4CL_MOE_INT_DOT = 'yes': expected 0 (the float decode), 1 (integer dot products");
  }
  ScopedEnv layout("FP4CL_MOE_TILES", "vec=8,group=8");
  {
    ScopedEnv unset("FP4CL_MOE_INT_DOT", "");
    const bool bf16 = moe_bf16_dot_enabled(test_context());
    EXPECT_EQ(moe_int_dot_enabled(test_context(), kNvW4A4, 8, 8), !bf16);
    EXPECT_EQ(moe_int_dot_enabled(test_context(), kMxW4A4, 8, 8), !bf16);
    // W4A16: activations on their integer grid (MoeConfig.W4A16IntegerPlanes), where denormals are kept.
    EXPECT_EQ(moe_int_dot_enabled(test_context(), kNvW4A16, 8, 8), !bf16 && test_context().info().fp32_denormals);
    {
      ScopedEnv off("FP4CL_W4A16_INT", "0");
      EXPECT_FALSE(moe_int_dot_enabled(test_context(), kNvW4A16, 8, 8)) << "FP4CL_W4A16_INT=0";
    }
    EXPECT_FALSE(moe_int_dot_enabled(test_context(), kNvW4A4, 16, 16)) << "16-lane layouts keep their own paths";
    if (bf16) {
      ScopedEnv no_bf16("FP4CL_MOE_BF16_DOT", "0");
      EXPECT_TRUE(moe_int_dot_enabled(test_context(), kNvW4A4, 8, 8)) << "without the BF16 dot products";
    }
  }
  ScopedEnv no_bf16("FP4CL_MOE_BF16_DOT", "0");  // CPUs with AVX-512 BF16 would take those instead
  for (const auto& [scheme, strategy] : {std::pair{kNvW4A4, "grouped"}, std::pair{kNvW4A4, "decode"},
                                         std::pair{kMxW4A4, "grouped"}, std::pair{kMxW4A4, "decode"}}) {
    const std::int64_t E = 8, H = 320, I = 288;
    const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::exact, 61});
    MoeConfig cfg = config(scheme, 2);
    cfg.kernel = strategy;
    for (const std::int64_t T : {1, 5, 16}) {
      const auto x = make_activations(T, H, Data::exact, 62 + T);
      const auto ids = make_ids(T, 2, E, 63 + T);
      const auto w = make_weights(T, 2, 64 + T);
      const auto ref =
          reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
      std::vector<std::uint16_t> x86;
      for (const char* choice : {"1", "portable", "0"}) {
        ScopedEnv env("FP4CL_MOE_INT_DOT", choice);
        LogCapture log;
        MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
        // The integer form reaches FC1's build (and, portable, without the x86 builtins), or not.
        EXPECT_EQ(built_with(log, "moe_fc1.cl", "MOE_INT_CODES"), std::string(choice) != "0")
            << scheme.name() << " " << strategy << " FP4CL_MOE_INT_DOT=" << choice;
        EXPECT_EQ(built_with(log, "moe_fc1.cl", "MOE_INT_NO_X86"), std::string(choice) == "portable")
            << scheme.name() << " " << strategy << " FP4CL_MOE_INT_DOT=" << choice;
        const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, T);
        EXPECT_TRUE(matches_reference(ref, dev, cfg.output))
            << scheme.name() << " " << strategy << " FP4CL_MOE_INT_DOT=" << choice << " T=" << T;
        EXPECT_EQ(dev.bf16, run_topk(layer, cfg.output, x, ids, w, T).bf16) << "a rerun differs";
        if (std::string(choice) == "1") x86 = dev.bf16;
        if (std::string(choice) == "portable") {
          EXPECT_EQ(dev.bf16, x86) << scheme.name() << " " << strategy << " T=" << T
                                   << ": the portable integer path gave other bits";
        }
      }
    }
  }
}

// MXFP4's weight scales in the integer loops (kernels/moe_int_dot.cl, moe_int_mx_wscales): the
// float decode's 2^(e + scale_exp - 127) times 2^(MOE_E2M1_EXP - 2), built from the E8M0 byte e in
// integer lanes, against the host's exact power of two (rounded to fp32: subnormals below 2^-126,
// 0 below 2^-149) for every finite byte, under both E2M1 decodes and the scale_exp values a layer
// may take. The layer tests meet only normal scales; this reaches the subnormal and zero ones.
TEST(MoeConfig, MxfpIntWeightScalesAreExactPowersOfTwo) {
  const Context& ctx = test_context();
  if (ctx.info().kind != DeviceKind::cpu || !ctx.info().fp32_denormals)
    GTEST_SKIP() << "the integer dot products are for CPU devices; the check needs fp32 denormals";
  const char* probe = R"CLC(
__kernel void mx_wscales(__global const uchar* bytes, int scale_exp, __global float* out) {
  const int i = get_global_id(0);
  vstore8(moe_int_mx_wscales(bytes + 8 * i, scale_exp), i, out);
}
)CLC";
  std::vector<std::uint8_t> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(b);
  cl::Buffer in(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes.size(), bytes.data());
  cl::Buffer out(ctx.opencl_context(), CL_MEM_WRITE_ONLY, 4 * bytes.size());
  for (const auto& [e2m1_exp, scale_exps] : {std::pair{-126, std::vector<int>{126, 119, 100}},
                                             std::pair{0, std::vector<int>{0, -5}}}) {
    BuildOptions options;
    options.define("MOE_VEC", 8).define("MOE_GROUP", 8).define("MOE_INT_CODES");
    if (e2m1_exp == 0) options.define("MOE_E2M1_NO_DENORM");
    cl::Program program(ctx.opencl_context(), kernel_source("moe_fp4_vec.cl") + probe);
    if (program.build({ctx.device()}, options.str().c_str()) != CL_SUCCESS) {
      FAIL() << program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(ctx.device());
    }
    cl::Kernel kernel(program, "mx_wscales");
    for (const int scale_exp : scale_exps) {
      kernel.setArg(0, in);
      kernel.setArg(1, scale_exp);
      kernel.setArg(2, out);
      ASSERT_EQ(ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(32)), CL_SUCCESS);
      std::vector<float> got(256);
      ASSERT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, 4 * got.size(), got.data()), CL_SUCCESS);
      int subnormal = 0, zero = 0;
      for (int b = 0; b < 255; ++b) {  // 255: E8M0's NaN, which a layer refuses
        const auto want = static_cast<float>(std::ldexp(1.0, b + scale_exp - 127 + e2m1_exp - 2));
        EXPECT_EQ(got[static_cast<std::size_t>(b)], want) << "byte " << b << " scale_exp " << scale_exp;
        subnormal += want > 0.0f && want < 0x1p-126f;
        zero += want == 0.0f;
      }
      if (scale_exp == 100) {
        EXPECT_TRUE(subnormal == 23 && zero > 0) << subnormal << " subnormal, " << zero << " zero";
      }
    }
  }
}

// Tiles of up to 4 pairs under NVFP4 W4A16 with scaled activations (kernels/moe_fp4_vec.cl,
// MOE_SCALEDX): the 8-lane layout forced, against the reference with it on and off, for activations
// whose 8-element chunks mix 2^20 with values near 2^-40, zero chunks and ordinary ones (T = 1, 5
// and 16 over 8 experts with k = 2: tiles of 1 to 8 pairs, grouped and decode), and a token of
// BF16 denormals whose sums the FC1 global scales, raised by 2^110, lift into the normal range (not
// flushed); the option reaches FC1's build exactly when on.
TEST(MoeConfig, ScaledActivationsMatchReference) {
  if (test_context().info().kind != DeviceKind::cpu) GTEST_SKIP() << "the scaled activations are for CPU devices";
  {
    ScopedEnv bad("FP4CL_MOE_SCALED_X", "yes");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A16, 2),
                        "FP4CL_MOE_SCALED_X = 'yes': expected 0 (the float decode");
  }
  ScopedEnv layout("FP4CL_MOE_TILES", "vec=8,group=8");
  if (moe_bf16_dot_enabled(test_context())) GTEST_SKIP() << "this CPU takes the BF16 dot products instead";
  if (test_context().info().fp32_denormals) {
    EXPECT_FALSE(moe_scaled_x_enabled(test_context(), kNvW4A16, 8, 8, -126)) << "W4A16 takes the integer planes";
  }
  ScopedEnv exact("FP4CL_W4A16_INT", "0");  // the scaled activations serve W4A16 where the planes do not
  EXPECT_FALSE(moe_scaled_x_enabled(test_context(), kNvW4A4, 8, 8, -126)) << "W4A4 takes the integer products";
  EXPECT_FALSE(moe_scaled_x_enabled(test_context(), kNvW4A16, 8, 8, 0)) << "needs the subnormal decode";
  if (!test_context().info().fp32_denormals) GTEST_SKIP() << "the scaled activations meet subnormal weights";
  // They meet the decode to subnormals, which CPUs that multiply denormals slowly do not take by
  // default (cpu_denormal_speed.hpp; an AVX2-only Intel CPU would): it is forced here.
  if (cpu_fp32_denormals_slow(test_context().info())) {
    LogCapture log;
    MoeConfig cfg = config(kNvW4A16, 2);
    MoeLayer layer = MoeLayer::create(test_context(), make_experts({WeightFormat::nvfp4, 8, 64, 64, Data::exact, 80}), cfg);
    EXPECT_FALSE(built_with(log, "moe_fc1.cl", "MOE_SCALED_X")) << "the default exact decode has no scaled activations";
  }
  ScopedEnv subnormal("FP4CL_MOE_E2M1_DECODE", "subnormal");
  const std::int64_t E = 8, H = 320, I = 288;
  const auto check = [&](const Fp4Experts& ex, const char* strategy, const std::vector<std::uint16_t>& x,
                         std::int64_t T, const std::string& what) {
    MoeConfig cfg = config(kNvW4A16, 2);
    cfg.kernel = strategy;
    const auto ids = make_ids(T, 2, E, 83 + T);
    const auto w = make_weights(T, 2, 84 + T);
    const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
    std::vector<DeviceResult> results;
    for (const char* choice : {"1", "0"}) {
      ScopedEnv env("FP4CL_MOE_SCALED_X", choice);
      LogCapture log;
      MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
      EXPECT_EQ(built_with(log, "moe_fc1.cl", "MOE_SCALED_X"), std::string(choice) == "1")
          << what << " FP4CL_MOE_SCALED_X=" << choice;
      results.push_back(run_topk(layer, cfg.output, x, ids, w, T));
      EXPECT_TRUE(matches_reference(ref, results.back(), cfg.output)) << what << " FP4CL_MOE_SCALED_X=" << choice;
      EXPECT_EQ(results.back().bf16, run_topk(layer, cfg.output, x, ids, w, T).bf16) << what << ": a rerun differs";
    }
    return results.front();
  };
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 81});
  for (const char* strategy : {"grouped", "decode"}) {
    for (const std::int64_t T : {1, 5, 16}) {
      check(ex, strategy, wide_chunk_activations(T, H, 8, 82 + T, false), T,
            std::string(strategy) + " wide T=" + std::to_string(T));
    }
  }
  const DenormalToken tiny = denormal_token(ex, H, 91);
  const DeviceResult dev = check(tiny.lifted, "decode", tiny.x, 1, "denormal activations");
  EXPECT_GT(nonzero_outputs(dev, MoeOutput::bf16, H), H / 2) << "the denormal activations were flushed";
}

// Tiles of up to 4 pairs under NVFP4 and MXFP4 W4A16 with the activations on their integer grid
// (chunks of 16 for FC1, 8 for FC2; kernels/moe_int_planes.cl, README Numerics): the 8-lane layout
// and (on CPUs with AVX-512 BF16) the integer path forced;
// against the reference (whose bound covers the grid) with the AVX2 builtins, without them
// (FP4CL_MOE_INT_DOT=portable: the same bits) and off (FP4CL_W4A16_INT=0), for activations whose
// 16-element chunks put 2^20 beside values near 2^-40 (rounded to zero), or elements 2^6 to 2^9
// below the largest with every significand (ties among them), zero chunks and ordinary ones (T =
// 1, 5 and 16 over 8 experts, k = 2: tiles of 1 to 8 pairs, grouped and decode); a
// token of BF16 denormals lifted into the normal range by the FC1 global scales (not flushed).
// Where every tile has at most 4 pairs (T = 1 and 5) the layer gives the same bits for x and for x
// on FC1's grid (reference::w4a16_int_grid_values): the planes are all it reads. A NaN or an
// infinity in a token makes that token's outputs NaN and leaves the others' bits alone. (Rounding
// ties move FC1's sums by one step of the grid, which FC2's BF16 inputs mostly hide: the rounding
// itself, common/int_grid.cl for chunks of 8 and 16 alike, is checked element by element by
// LinearActivationPass.IntegerPlanesHoldTheChunkGrid; a wrong element order or offset here fails.)
TEST(MoeConfig, W4A16IntegerPlanes) {
  if (test_context().info().kind != DeviceKind::cpu) GTEST_SKIP() << "the integer planes are for CPU devices";
  ScopedEnv layout("FP4CL_MOE_TILES", "vec=8,group=8");
  ScopedEnv unset("FP4CL_W4A16_INT", std::nullopt);
  ScopedEnv no_bf16("FP4CL_MOE_BF16_DOT", "0");  // CPUs with AVX-512 BF16 would take those instead
  if (!test_context().info().fp32_denormals) GTEST_SKIP() << "the planes' factors need fp32 denormals";
  {
    ScopedEnv bad("FP4CL_W4A16_INT", "yes");
    expect_create_error(make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 33}), config(kNvW4A16, 2),
                        "FP4CL_W4A16_INT = 'yes': expected 0");
  }
  const std::int64_t E = 8, H = 320, I = 288;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 101});
  const Fp4Experts mx = make_experts({WeightFormat::mxfp4, E, H, I, Data::exact, 105});
  const auto on_grid = [&](const std::vector<std::uint16_t>& x) {
    std::vector<double> v(x.size()), g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) v[i] = bf16_to_float(x[i]);
    reference::w4a16_int_grid_values(v.data(), static_cast<std::int64_t>(v.size()), 16, g.data());
    std::vector<std::uint16_t> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      out[i] = static_cast<std::uint16_t>(float_to_bf16(static_cast<float>(g[i])));
    return out;
  };
  const auto check = [&](const Fp4Experts& experts, const char* strategy, const std::vector<std::uint16_t>& x,
                         std::int64_t T, const std::string& what) {
    MoeConfig cfg = config({experts.format, Activations::bf16}, 2);
    cfg.kernel = strategy;
    cfg.output = MoeOutput::fp32;
    const auto ids = make_ids(T, 2, E, 103 + T);
    const auto w = make_weights(T, 2, 104 + T);
    const auto ref =
        reference::moe_reference(experts, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
    std::vector<DeviceResult> results;
    for (const auto& [var, choice] : {std::pair{"FP4CL_MOE_INT_DOT", "1"}, std::pair{"FP4CL_MOE_INT_DOT", "portable"},
                                      std::pair{"FP4CL_W4A16_INT", "0"}}) {
      ScopedEnv env(var, choice);
      LogCapture log;
      MoeLayer layer = MoeLayer::create(test_context(), experts, cfg);
      const bool planes = std::string(choice) != "0";
      EXPECT_EQ(built_with(log, "moe_fc1.cl", "MOE_INT_PLANES"), planes) << what << " " << var << "=" << choice;
      results.push_back(run_topk(layer, cfg.output, x, ids, w, T));
      EXPECT_TRUE(matches_reference(ref, results.back(), cfg.output)) << what << " " << var << "=" << choice;
      EXPECT_EQ(results.back().fp32, run_topk(layer, cfg.output, x, ids, w, T).fp32) << what << ": a rerun differs";
      if (planes && T <= 5) {
        EXPECT_EQ(results.back().fp32, run_topk(layer, cfg.output, on_grid(x), ids, w, T).fp32)
            << what << " " << var << "=" << choice << ": x and x on its grid gave other bits";
      }
    }
    EXPECT_EQ(results[0].fp32, results[1].fp32) << what << ": the portable integer path gave other bits";
    return results;
  };
  // MXFP4: FC1's chunks of 16 are half blocks, each with the block's E8M0 scales.
  for (const Fp4Experts* experts : {&ex, &mx}) {
    for (const char* strategy : {"grouped", "decode"}) {
      for (const std::int64_t T : {1, 5, 16}) {
        const std::vector<std::uint16_t> x = wide_chunk_activations(T, H, 16, 102 + T, true);
        ASSERT_NE(on_grid(x), x) << "the data should exercise the rounding";
        const std::string what = fmt::format("{} {} wide T={}", to_string(experts->format), strategy, T);
        const auto r = check(*experts, strategy, x, T, what);
        EXPECT_NE(r[0].fp32, r[2].fp32) << what << ": the grid should show in the outputs";
      }
    }
  }
  const DenormalToken tiny = denormal_token(ex, H, 111);
  const auto dev = check(tiny.lifted, "decode", tiny.x, 1, "denormal activations");
  EXPECT_GT(nonzero_outputs(dev[0], MoeOutput::fp32, H), H / 2) << "the denormal activations were flushed";
  // NaN and an infinity in token 1 of 3.
  MoeConfig cfg = config(kNvW4A16, 2);
  cfg.kernel = "decode";
  cfg.output = MoeOutput::fp32;
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const std::vector<std::uint16_t> x3 = make_activations(3, H, Data::exact, 121);
  const auto ids = make_ids(3, 2, E, 122);
  const auto w = make_weights(3, 2, 123);
  const DeviceResult clean = run_topk(layer, cfg.output, x3, ids, w, 3);
  for (const std::uint16_t bad : {std::uint16_t{0x7FC0}, std::uint16_t{0xFF80}}) {
    std::vector<std::uint16_t> xb = x3;
    xb[static_cast<std::size_t>(H + 37)] = bad;
    const DeviceResult spoiled = run_topk(layer, cfg.output, xb, ids, w, 3);
    for (std::int64_t h = 0; h < H; ++h) {
      EXPECT_TRUE(std::isnan(spoiled.fp32[static_cast<std::size_t>(H + h)])) << std::hex << bad << " " << h;
      for (const std::int64_t t : {std::int64_t{0}, std::int64_t{2}}) {
        const auto i = static_cast<std::size_t>(t * H + h);
        EXPECT_EQ(std::memcmp(&spoiled.fp32[i], &clean.fp32[i], 4), 0) << "token " << t << " element " << h;
      }
    }
  }
}

// The GPU configuration — one row per work-item, rows interleaved in groups of 64, 64-wide
// work-groups — run on whatever device the tests use (tiles of 4 rather than 8: a shorter build).
TEST(MoeConfig, GpuLayoutMatchesReference) {
  ScopedEnv env("FP4CL_MOE_TILES",
                "vec=1,group=64,grouped.tile_m=4,grouped.local_i=64,grouped.local_h=64,decode.local_i=64,"
                "decode.local_h=64");
  const std::int64_t T = 37;
  for (const QuantScheme& scheme : {kNvW4A4, QuantScheme{WeightFormat::mxfp4, Activations::bf16}}) {
    const std::int64_t H = 96, I = scheme.weight == WeightFormat::nvfp4 ? 80 : 96;  // 80: a partial row group
    const Fp4Experts ex = make_experts({scheme.weight, 8, H, I, Data::exact, 34});
    const auto x = make_activations(T, H, Data::exact, 35);
    const auto ids = make_ids(T, 2, 8, 36);
    const auto w = make_weights(T, 2, 37);
    for (const char* strategy : {"grouped", "decode"}) {
      if (scheme.w4a16() && std::string(strategy) == "decode") continue;  // one MXFP4 build is enough
      MoeConfig cfg = config(scheme, 2);
      cfg.kernel = strategy;
      MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
      const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
      EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output))
          << scheme.name() << " " << strategy;
    }
  }
}

TEST(MoeConfig, TileOverridesAreValidated) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 38});
  const std::pair<const char*, const char*> cases[] = {
      {"grouped.tile_m=3", "grouped.tile_m = 3 must be 1, 2, 4 or 8"},
      {"tiles=2", "unknown key 'tiles'"},
      {"grouped.tile_m", "'grouped.tile_m' is not key=positive integer"},
      {"decode.local_h=0", "'decode.local_h=0' is not key=positive integer"},
      {"mma.routed_fc2=-1", "'mma.routed_fc2=-1' is not key=non-negative integer"},
      {"tiles", "unknown key 'tiles'"},  // the key is named first, with or without a value
      {"vec=3,group=3", "vec = 3 must be 1, 2, 4, 8 or 16 and divide group = 3"},
  };
  for (const auto& [value, message] : cases) {
    ScopedEnv env("FP4CL_MOE_TILES", value);
    expect_create_error(ex, config(kNvW4A4, 2), message);
  }
  // A forced strategy whose tiles the problem refuses names the reason.
  ScopedEnv env("FP4CL_MOE_TILES", "vec=8,group=8,decode.local_i=1");
  MoeConfig cfg = config(kNvW4A4, 2);
  cfg.kernel = "decode";
  expect_create_error(ex, cfg, "an FC1 work-group covers 8 rows, not a multiple of the NVFP4 block size 16");
}

TEST(MoeConfig, Fp32OutputMatchesReference) {
  const std::int64_t T = 11;
  const Fp4Experts ex = make_experts({WeightFormat::mxfp4, 8, 64, 64, Data::exact, 12});
  MoeConfig cfg = config({WeightFormat::mxfp4, Activations::fp4_dynamic}, 2);
  cfg.output = MoeOutput::fp32;
  cfg.kernel = "decode";  // the grouped strategy's fp32 store runs in MoeDispatch.ExpertMap*
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto x = make_activations(T, 64, Data::exact, 13);
  const auto ids = make_ids(T, 2, 8, 14);
  const auto w = make_weights(T, 2, 15);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
  EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output));
}

TEST(MoeConfig, CalibratedFc2InputScale) {
  const std::int64_t T = 9;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 64, 64, Data::exact, 16});
  const auto x = make_activations(T, 64, Data::exact, 17);
  const auto ids = make_ids(T, 2, 8, 18);
  const auto w = make_weights(T, 2, 19);
  MoeConfig cfg = config(kNvW4A4, 2);
  cfg.output = MoeOutput::fp32;
  cfg.kernel = "grouped";  // the FC2 input scale is applied by FC1, the same in both strategies
  MoeLayer dynamic = MoeLayer::create(test_context(), ex, cfg);
  cfg.fc2_input_scale = MoeFc2InputScale::calibrated;
  MoeLayer calibrated = MoeLayer::create(test_context(), ex, cfg);
  const DeviceResult dev = run_topk(calibrated, cfg.output, x, ids, w, T);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
  EXPECT_TRUE(matches_reference(ref, dev, cfg.output));
  // The FC2 input scale changes the quantization grid, hence the result.
  EXPECT_NE(dev.fp32, run_topk(dynamic, cfg.output, x, ids, w, T).fp32);
}

// Generic data (Gaussian activations, any block scale, arbitrary global scales): the bound is
// looser there but still rigorous.
TEST(MoeConfig, GenericDataMatchesReference) {
  const std::int64_t T = 13;
  for (const QuantScheme& scheme : {kNvW4A4, kNvW4A16}) {
    const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 96, 64, Data::generic, 20});
    MoeConfig cfg = config(scheme, 2);
    cfg.kernel = "grouped";
    MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
    const auto x = make_activations(T, 96, Data::generic, 21);
    const auto ids = make_ids(T, 2, 8, 22);
    const auto w = make_weights(T, 2, 23);
    const auto ref = reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, 2));
    EXPECT_TRUE(matches_reference(ref, run_topk(layer, cfg.output, x, ids, w, T), cfg.output)) << scheme.name();
  }
}

// Gate and up carry different global scales in every expert: a reference that swapped them
// must reject the layer's output (the tolerance can tell them apart).
TEST(MoeConfig, GateAndUpScalesAreKeptApart) {
  const std::int64_t T = 8;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 24});
  const MoeConfig cfg = config(kNvW4A16, 2);
  MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const auto x = make_activations(T, 64, Data::exact, 25);
  const auto ids = make_ids(T, 2, 4, 26);
  const auto w = make_weights(T, 2, 27);
  const DeviceResult dev = run_topk(layer, cfg.output, x, ids, w, T);
  const auto routing = reference::routing_from_topk(ids, w, T, 2);
  EXPECT_TRUE(matches_reference(reference::moe_reference(ex, reference_options(cfg), x, routing), dev, cfg.output));
  Fp4Experts swapped = ex;
  for (std::size_t e = 0; e < 4; ++e) std::swap(swapped.w13_global_scale[2 * e], swapped.w13_global_scale[2 * e + 1]);
  EXPECT_FALSE(matches_reference(reference::moe_reference(swapped, reference_options(cfg), x, routing), dev, cfg.output));
}

TEST(MoeConfig, BuffersTooSmallOrOfAnotherContextAreErrors) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 32, Data::exact, 28});
  MoeLayer layer = MoeLayer::create(test_context(), ex, config(kNvW4A16, 2));
  const cl::Context& c = test_context().opencl_context();
  const cl::Buffer small(c, CL_MEM_READ_WRITE, 16), x(c, CL_MEM_READ_WRITE, 4 * 64 * 2),
      ids(c, CL_MEM_READ_WRITE, 4 * 2 * 4), out(c, CL_MEM_READ_WRITE, 4 * 64 * 2);
  const auto message = [&](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([&] { layer.enqueue_topk(small, ids, ids, out, 4); }).find("the x buffer has 16 bytes; [T, H] BF16 needs 512"), std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_topk(x, small, ids, out, 4); }).find("the topk_ids buffer has 16 bytes; [T, k] int32 needs 32"), std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_logits(x, small, out, 4); }).find("the router_logits buffer has 16 bytes; [T, E_global] fp32 needs 64"), std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_topk(x, ids, ids, small, 4); }).find("the out buffer has 16 bytes"), std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_topk(x, ids, ids, out, -1); }).find("tokens = -1 is negative"), std::string::npos);
  // A buffer of another OpenCL context (the same device) is refused by name before any launch (on
  // NVIDIA the launch failed as CL_INVALID_MEM_OBJECT of a kernel argument; PoCL ran it).
  const cl::Context other(test_context().device());
  const cl::Buffer foreign(other, CL_MEM_READ_WRITE, 4 * 64 * 2);
  EXPECT_NE(message([&] { layer.enqueue_topk(x, foreign, ids, out, 4); })
                .find("MoE: the topk_ids buffer belongs to another OpenCL context"),
            std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_topk(foreign, ids, ids, out, 4); }).find("the x buffer belongs to another"),
            std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_logits(x, foreign, out, 4); }).find("the router_logits buffer belongs"),
            std::string::npos);
  EXPECT_NE(message([&] { layer.enqueue_topk(x, ids, ids, foreign, 4); }).find("the out buffer belongs"),
            std::string::npos);
  // T = 0 enqueues nothing.
  const MoeCall call = layer.enqueue_topk(small, small, small, small, 0);
  EXPECT_TRUE(call.launches.empty());
  EXPECT_EQ(layer.finish(call).local_pairs, 0);
}

}  // namespace
}  // namespace fp4cl::test
