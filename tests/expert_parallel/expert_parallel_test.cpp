// ExpertParallelMoe over shards on the test device (PoCL sub-devices, or separate contexts):
// every scheme against the scalar reference and the single-device MoeLayer, run-to-run bit
// identity, one shard bit-identical to a MoeLayer, explicit maps, logit routing, invalid ids and
// bad arguments.
#include "fp4cl/expert_parallel.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "common/formats.cl"
#include "fp4cl/error.hpp"
#include "moe/moe_test_support.hpp"
#include "support/errors.hpp"
#include "shard_contexts.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kSchemes[] = {{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                {WeightFormat::nvfp4, Activations::bf16},
                                {WeightFormat::mxfp4, Activations::fp4_dynamic},
                                {WeightFormat::mxfp4, Activations::bf16}};

std::string scheme_name(const QuantScheme& s) {
  return fmt::format("{}_{}", s.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4", s.w4a16() ? "W4A16" : "W4A4");
}

DeviceResult as_result(std::vector<std::uint16_t> bf16) {
  DeviceResult r;
  r.bf16 = std::move(bf16);
  return r;
}
DeviceResult as_result(std::vector<float> fp32) {
  DeviceResult r;
  r.fp32 = std::move(fp32);
  return r;
}

using Param = std::tuple<QuantScheme, ShardDevices>;

class ExpertParallel : public ::testing::TestWithParam<Param> {};

// Two shards, contiguous split. Each output type: within the reference's bound, the same bits on
// every rerun, and close to (but, by the sum order, not necessarily bit-equal to) one MoeLayer.
TEST_P(ExpertParallel, MatchesReferenceAndSingleDevice) {
  const auto& [scheme, kind] = GetParam();
  std::string why;
  const std::vector<Context>& devices = shard_contexts(kind, 2, &why);
  if (devices.empty()) GTEST_SKIP() << why;
  const std::int64_t T = 41, E = 16, H = 64, I = 96;
  const int k = 4;
  const std::uint64_t seed = 100 + static_cast<std::uint64_t>(scheme.weight == WeightFormat::nvfp4) * 10 +
                             static_cast<std::uint64_t>(scheme.w4a16());
  const Fp4Experts ex = make_experts({scheme.weight, E, H, I, Data::exact, seed});
  const auto x = make_activations(T, H, Data::exact, seed + 1);
  const auto ids = make_ids(T, k, E, seed + 2);
  const auto w = make_weights(T, k, seed + 3);
  for (MoeOutput output : {MoeOutput::fp32, MoeOutput::bf16}) {
    MoeConfig cfg;
    cfg.scheme = scheme;
    cfg.top_k = k;
    cfg.output = output;
    const auto ref =
        reference::moe_reference(ex, reference_options(cfg), x, reference::routing_from_topk(ids, w, T, k));
    EXPECT_LE(median_bound_ulps(ref), 2.0);  // a tight bound: not a vacuous comparison
    MoeLayer single = MoeLayer::create(test_context(), ex, cfg);
    const DeviceResult one = run_topk(single, output, x, ids, w, T);
    ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg);
    ASSERT_EQ(ep.num_shards(), 2);
    EXPECT_EQ(ep.shard(0).num_local_experts(), 8);
    EXPECT_EQ(ep.shard(1).num_global_experts(), E);

    DeviceResult got;
    MoeStats stats;
    if (output == MoeOutput::fp32) {
      std::vector<float> out;
      stats = ep.forward_topk(x, ids, w, T, out);
      got = as_result(out);
      std::vector<float> again;
      ep.forward_topk(x, ids, w, T, again);
      ASSERT_EQ(0, std::memcmp(out.data(), again.data(), out.size() * 4)) << "a rerun changed the output bits";
      std::size_t differ = 0;
      double worst = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        differ += std::memcmp(&out[i], &one.fp32[i], 4) != 0;
        worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - one.fp32[i]) / (ref.bound[i] + 1e-30));
      }
      // Both are within the reference bound; record how far apart the two sum orders land.
      RecordProperty("fp32_elements_differing_from_single_device", static_cast<int>(differ));
      std::printf(
          "[ info ] %s: %zu of %zu fp32 outputs differ in bits from the single-device layer; "
          "largest difference %.3f of the reference bound\n",
          scheme_name(scheme).c_str(), differ, out.size(), worst);
    } else {
      std::vector<std::uint16_t> out;
      stats = ep.forward_topk(x, ids, w, T, out);
      got = as_result(out);
      std::vector<std::uint16_t> again;
      ep.forward_topk(x, ids, w, T, again);
      ASSERT_EQ(out, again) << "a rerun changed the output bits";
    }
    EXPECT_TRUE(matches_reference(ref, got, output)) << "output " << (output == MoeOutput::fp32 ? "fp32" : "bf16");
    EXPECT_TRUE(matches_reference(ref, one, output));
    // Every pair ran on exactly one shard.
    EXPECT_EQ(stats.tokens, T);
    EXPECT_EQ(stats.local_pairs, T * k);
    ASSERT_EQ(ep.shard_stats().size(), 2u);
    std::int64_t on_first = 0;
    for (auto id : ids) on_first += id < 8;
    EXPECT_EQ(ep.shard_stats()[0].local_pairs, on_first);
    EXPECT_EQ(ep.shard_stats()[1].local_pairs, T * k - on_first);
    EXPECT_EQ(stats.weight_bytes, ep.shard_stats()[0].weight_bytes + ep.shard_stats()[1].weight_bytes);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return scheme_name(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, ExpertParallel,
                         ::testing::Combine(::testing::ValuesIn(kSchemes),
                                            ::testing::Values(ShardDevices::sub_devices,
                                                              ShardDevices::separate_contexts)),
                         param_name);

// With one shard there is nothing to re-associate: the very bits of a MoeLayer, both outputs.
TEST(ExpertParallelOneShard, IsBitIdenticalToMoeLayer) {
  const std::int64_t T = 29, E = 8, H = 64, I = 64;
  const int k = 2;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::generic, 201});
  const auto x = make_activations(T, H, Data::generic, 202);
  const auto logits = make_logits(T, E, 203);
  for (MoeOutput output : {MoeOutput::fp32, MoeOutput::bf16}) {
    MoeConfig cfg;
    cfg.scheme = {WeightFormat::nvfp4, Activations::fp4_dynamic};
    cfg.top_k = k;
    cfg.output = output;
    MoeLayer single = MoeLayer::create(test_context(), ex, cfg);
    const DeviceResult one = run_logits(single, output, x, logits, T);
    ExpertParallelMoe ep = ExpertParallelMoe::create({test_context()}, ex, cfg);
    if (output == MoeOutput::fp32) {
      std::vector<float> out;
      ep.forward_logits(x, logits, T, out);
      ASSERT_EQ(out.size(), one.fp32.size());
      EXPECT_EQ(0, std::memcmp(out.data(), one.fp32.data(), out.size() * 4));
    } else {
      std::vector<std::uint16_t> out;
      ep.forward_logits(x, logits, T, out);
      EXPECT_EQ(out, one.bf16);
    }
  }
}

// Three shards (separate contexts) with a round-robin map, routing from router logits, a batch
// larger than the shards' workspace (chunks), and an empty batch.
TEST(ExpertParallelMaps, RoundRobinOverThreeShardsWithLogits) {
  const std::vector<Context>& devices = shard_contexts(ShardDevices::separate_contexts, 3);
  const std::int64_t T = 50, E = 12, H = 64, I = 64;
  const int k = 3;
  const Fp4Experts ex = make_experts({WeightFormat::mxfp4, E, H, I, Data::exact, 301});
  const auto x = make_activations(T, H, Data::exact, 302);
  const auto logits = make_logits(T, E, 303);
  std::vector<std::vector<std::int32_t>> maps(3, std::vector<std::int32_t>(E, -1));
  for (std::int64_t g = 0; g < E; ++g)
    maps[static_cast<std::size_t>(g % 3)][static_cast<std::size_t>(g)] = static_cast<std::int32_t>(g / 3);
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::mxfp4, Activations::fp4_dynamic};
  cfg.top_k = k;
  cfg.renormalize = true;
  cfg.max_tokens = 16;
  ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg, maps);
  EXPECT_EQ(ep.expert_map(2), maps[2]);
  std::vector<std::uint16_t> out;
  const MoeStats stats = ep.forward_logits(x, logits, T, out);
  const auto routing = reference::routing_from_logits(logits, T, E, k, true);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, routing);
  EXPECT_TRUE(matches_reference(ref, as_result(out), MoeOutput::bf16));
  EXPECT_EQ(stats.local_pairs, T * k);
  for (int s = 0; s < 3; ++s) {
    std::int64_t mine = 0;
    for (auto id : routing.ids) mine += id % 3 == s;
    EXPECT_EQ(ep.shard_stats()[static_cast<std::size_t>(s)].local_pairs, mine) << "shard " << s;
  }
  std::vector<std::uint16_t> none{1, 2, 3};
  const MoeStats empty = ep.forward_logits({}, {}, 0, none);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(empty.local_pairs, 0);
}

// DeepSeek-V3's gate over two shards: each routes the full logits with the same gate and keeps
// its experts' slots; together they give the reference's routing.
TEST(ExpertParallelMaps, ShardsRouteWithTheSameGate) {
  const std::vector<Context>& devices = shard_contexts(ShardDevices::separate_contexts, 2);
  const std::int64_t T = 9, E = 16, H = 64, I = 64;
  const int k = 4;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 311});
  const auto x = make_activations(T, H, Data::exact, 312);
  const auto logits = make_logits(T, E, 313);
  std::vector<std::vector<std::int32_t>> maps(2, std::vector<std::int32_t>(E, -1));
  for (std::int64_t g = 0; g < E; ++g)
    maps[static_cast<std::size_t>(g / 8)][static_cast<std::size_t>(g)] = static_cast<std::int32_t>(g % 8);
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::bf16};
  cfg.top_k = k;
  cfg.logit_routing.scoring = MoeLogitRouting::Scoring::sigmoid;
  cfg.logit_routing.groups = 4;
  cfg.logit_routing.top_groups = 2;
  for (std::int64_t e = 0; e < E; ++e) cfg.logit_routing.correction_bias.push_back(0.03125f * static_cast<float>(e % 5));
  cfg.logit_routing.scaling_factor = 2.5f;
  ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg, maps);
  std::vector<std::uint16_t> out;
  const MoeStats stats = ep.forward_logits(x, logits, T, out);
  const auto routing = reference::routing_from_logits(logits, T, E, k, true, cfg.logit_routing);
  ASSERT_FALSE(routing.ambiguous);
  const auto ref = reference::moe_reference(ex, reference_options(cfg), x, routing);
  EXPECT_TRUE(matches_reference(ref, as_result(out), MoeOutput::bf16));
  EXPECT_EQ(stats.local_pairs, T * k);
  std::int64_t first = 0;
  for (auto id : routing.ids) first += id < 8;
  EXPECT_EQ(ep.shard_stats()[0].local_pairs, first);
  EXPECT_EQ(ep.shard_stats()[1].local_pairs, T * k - first);
}

template <typename T>
cl::Buffer upload_to(const Context& ctx, const std::vector<T>& v) {
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(4, v.size() * sizeof(T)));
  if (!v.empty()) ctx.queue().enqueueWriteBuffer(b, CL_TRUE, 0, v.size() * sizeof(T), v.data());
  return b;
}

// The all-to-all pattern of docs/expert-parallel.md, simulated with the shards' own layers: each
// shard gets only the tokens that have a slot on it (rows unchanged), in the order they arrive
// from two source ranks, and the owner adds the partials it gets back in shard order. With
// batch_invariant and a forced strategy a token's partial does not depend on the batch it travels
// in, so this gives the very bits of ExpertParallelMoe. (Measured on PoCL: without
// batch_invariant the arrival order changes the grouped tiles and 1 of the 1472 values differs.)
TEST(ExpertParallelMaps, AllToAllDispatchGivesTheBitsOfTheInProcessLayer) {
  const std::vector<Context>& devices = shard_contexts(ShardDevices::separate_contexts, 2);
  const std::int64_t T = 23, E = 8, H = 64, I = 64;
  const int k = 2;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::generic, 351});
  const auto x = make_activations(T, H, Data::generic, 352);
  const auto ids = make_ids(T, k, E, 353);
  const auto w = make_weights(T, k, 354);
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::fp4_dynamic};
  cfg.top_k = k;
  cfg.output = MoeOutput::fp32;
  cfg.kernel = "grouped";
  cfg.batch_invariant = true;
  ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg);
  std::vector<float> expected;
  ep.forward_topk(x, ids, w, T, expected);

  std::vector<float> y(static_cast<std::size_t>(T * H), 0.0f);
  for (int r = 0; r < 2; ++r) {
    const auto& map = ep.expert_map(r);
    std::vector<std::int64_t> sent;  // dispatch: the tokens with a slot on shard r, in order
    std::vector<std::uint16_t> xr;
    std::vector<std::int32_t> ir;
    std::vector<float> wr;
    // Two source ranks own the even and the odd tokens; shard r receives source 0's tokens, then
    // source 1's: another order than the in-process layer's, so other pairs share each tile.
    std::vector<std::int64_t> arrival;
    for (std::int64_t t = 0; t < T; t += 2) arrival.push_back(t);
    for (std::int64_t t = 1; t < T; t += 2) arrival.push_back(t);
    for (std::int64_t t : arrival) {
      bool mine = false;
      for (int j = 0; j < k; ++j)
        mine = mine || map[static_cast<std::size_t>(ids[static_cast<std::size_t>(t * k + j)])] >= 0;
      if (!mine) continue;
      sent.push_back(t);
      xr.insert(xr.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
      ir.insert(ir.end(), ids.begin() + t * k, ids.begin() + (t + 1) * k);
      wr.insert(wr.end(), w.begin() + t * k, w.begin() + (t + 1) * k);
    }
    ASSERT_GT(sent.size(), 0u);
    ASSERT_LT(sent.size(), static_cast<std::size_t>(T));  // a real subset: other batch, other tiles
    const Context& ctx = devices[static_cast<std::size_t>(r)];
    const auto n = sent.size() * static_cast<std::size_t>(H);
    const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, n * 4);
    ep.shard(r).forward_topk(upload_to(ctx, xr), upload_to(ctx, ir), upload_to(ctx, wr), out,
                             static_cast<std::int64_t>(sent.size()));
    std::vector<float> partial(n);
    ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 4, partial.data());
    // combine: the owner adds what comes back, in shard order
    for (std::size_t i = 0; i < sent.size(); ++i)
      for (std::int64_t h = 0; h < H; ++h)
        y[static_cast<std::size_t>(sent[i] * H + h)] +=
            partial[i * static_cast<std::size_t>(H) + static_cast<std::size_t>(h)];
  }
  ASSERT_EQ(y.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * 4));
}

// An invalid id is reported once every shard has finished; the layer stays usable.
TEST(ExpertParallelErrors, InvalidIdIsReportedAndTheLayerStaysUsable) {
  const std::vector<Context>& devices = shard_contexts(ShardDevices::separate_contexts, 2);
  const std::int64_t T = 12, E = 8;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 401});
  const auto x = make_activations(T, 64, Data::exact, 402);
  const auto ids = make_ids(T, 2, E, 403);
  const auto w = make_weights(T, 2, 404);
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::bf16};
  cfg.top_k = 2;
  ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg);
  std::vector<std::uint16_t> good;
  ep.forward_topk(x, ids, w, T, good);
  auto bad = ids;
  bad[7] = 8;  // token 3, slot 1
  std::vector<std::uint16_t> out;
  EXPECT_ERROR_HAS(ep.forward_topk(x, bad, w, T, out), "topk_ids[3, 1] = 8 is outside [0, 8)");
  std::vector<std::uint16_t> after;
  ep.forward_topk(x, ids, w, T, after);
  EXPECT_EQ(after, good);
}

TEST(ExpertParallelErrors, BadArgumentsAreClearErrors) {
  const std::vector<Context>& devices = shard_contexts(ShardDevices::separate_contexts, 2);
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 501});
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::bf16};
  cfg.top_k = 2;
  EXPECT_ERROR_HAS(ExpertParallelMoe::create({}, ex, cfg), "no devices given");
  EXPECT_ERROR_HAS(ExpertParallelMoe::create(std::vector<Context>(5, devices[0]), ex, cfg),
                   "4 experts cannot be split over 5 shards");
  EXPECT_ERROR_HAS(ExpertParallelMoe::create(devices, ex, cfg, {{0, 1, 2, 3}}), "1 expert maps for 2 devices");
  EXPECT_ERROR_HAS(ExpertParallelMoe::create(devices, ex, cfg, {{0, 1, -1, -1}, {-1, 0, 1, -1}}),
                   "global expert 1 is local on shard 0 and on shard 1");
  MoeConfig mapped = cfg;
  mapped.expert_map = {0, 1, 2, 3};
  EXPECT_ERROR_HAS(ExpertParallelMoe::create(devices, ex, mapped), "MoeConfig::expert_map must be empty");
  MoeConfig wrong_scheme = cfg;
  wrong_scheme.scheme = {WeightFormat::mxfp4, Activations::bf16};
  EXPECT_ERROR_HAS(ExpertParallelMoe::create(devices, ex, wrong_scheme), "ExpertParallelMoe: shard 0");

  ExpertParallelMoe ep = ExpertParallelMoe::create(devices, ex, cfg);
  const auto x = make_activations(3, 64, Data::exact, 502);
  const std::vector<std::int32_t> ids = {0, 1, 2, 3, 1, 2};
  const std::vector<float> w(6, 0.5f);
  std::vector<std::uint16_t> out;
  std::vector<float> out32;
  EXPECT_ERROR_HAS(ep.forward_topk(x, ids, w, 4, out), "x has 192 values; [T, H] BF16 needs 256");
  EXPECT_ERROR_HAS(ep.forward_topk(x, {0, 1}, w, 3, out), "topk_ids has 2 values; [T, k] int32 needs 6");
  EXPECT_ERROR_HAS(ep.forward_topk(x, ids, {0.5f}, 3, out), "topk_weights has 1 values");
  EXPECT_ERROR_HAS(ep.forward_logits(x, {1.0f}, 3, out), "router_logits has 1 values; [T, E_global] fp32 needs 12");
  EXPECT_ERROR_HAS(ep.forward_topk(x, ids, w, -1, out), "tokens = -1 is negative");
  EXPECT_ERROR_HAS(ep.forward_topk(x, ids, w, 3, out32),
                   "the layer's output is BF16; pass a std::vector<std::uint16_t>");
  EXPECT_ERROR_HAS(ep.shard(2), "the layer has 2 shards");
  EXPECT_NO_THROW(ep.forward_topk(x, ids, w, 3, out));
  EXPECT_EQ(out.size(), 3u * 64u);
}

}  // namespace
}  // namespace fp4cl::test
