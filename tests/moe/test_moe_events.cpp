// Launch events (include/fp4cl/moe.hpp, MoeLaunchEvents): on a queue that records no profiling
// times a call's commands get no events but each chunk's last one (an event costs host time: ~7 µs
// a launch on NVIDIA's OpenCL, bench/standalone/enqueue_costs.c), whose event is the call's
// `done`; on a profiling queue the call's first command gets one too (MoeLaunchEvents::ends, the
// default), or every launch (MoeLaunchEvents::every). The outputs are the same bits in every case,
// and consecutive calls on the non-profiling queue (no wait lists between them: the queue is in
// order) give the same bits as on the profiling one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "moe_test_support.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl::test {
namespace {

// An in-order queue without profiling on the test context's OpenCL context and device.
struct PlainQueue {
  cl_command_queue queue = nullptr;
  explicit PlainQueue(const Context& ctx) {
    cl_int err = CL_SUCCESS;
    queue = clCreateCommandQueue(ctx.opencl_context()(), ctx.device()(), 0, &err);
    EXPECT_EQ(err, CL_SUCCESS);
  }
  ~PlainQueue() {
    if (queue) clReleaseCommandQueue(queue);
  }
  PlainQueue(const PlainQueue&) = delete;
  PlainQueue& operator=(const PlainQueue&) = delete;
};

// NVFP4 top-2 fp32-output layers of strategy `kernel` over the default generic experts.
MoeConfig top2_config(const std::string& kernel, Activations activations) {
  MoeConfig config;
  config.scheme = QuantScheme{WeightFormat::nvfp4, activations};
  config.top_k = 2;
  config.kernel = kernel;
  config.output = MoeOutput::fp32;
  return config;
}
ExpertSpec generic_spec() {
  ExpertSpec spec;
  spec.data = Data::generic;
  return spec;
}

class MoeLaunchEventsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLaunchEventsTest, WhichLaunchesGetEvents) {
  const Context& profiled = test_context();
  ASSERT_TRUE(profiled.profiling_enabled());
  PlainQueue plain_queue(profiled);
  ASSERT_NE(plain_queue.queue, nullptr);
  const Context plain = Context::wrap(profiled.opencl_context()(), plain_queue.queue);
  ASSERT_FALSE(plain.profiling_enabled());

  const ExpertSpec spec = generic_spec();
  const Fp4Experts experts = make_experts(spec);
  MoeConfig config = top2_config(GetParam(), Activations::bf16);
  config.max_tokens = 3;  // 7 tokens: 3 chunks
  MoeLayer every = MoeLayer::create(profiled, experts, config);
  EXPECT_EQ(every.launch_events(), MoeLaunchEvents::ends) << "the default";
  every.set_launch_events(MoeLaunchEvents::every);
  MoeLayer ends = MoeLayer::create(profiled, experts, config);
  MoeLayer without = MoeLayer::create(plain, experts, config);
  without.set_launch_events(MoeLaunchEvents::every);  // no profiling: no effect

  const std::int64_t tokens = 7;
  const auto x = make_activations(tokens, spec.hidden, spec.data, 3);
  const auto ids = make_ids(tokens, config.top_k, spec.experts, 4);
  const auto weights = make_weights(tokens, config.top_k, 5);
  const DeviceResult a = run_topk(every, config.output, x, ids, weights, tokens);
  EXPECT_EQ(a.call.events().size(), a.call.launches.size());
  for (const MoeLaunch& l : a.call.launches) EXPECT_NE(l.event(), nullptr) << l.kernel;
  EXPECT_EQ(a.call.done(), a.call.launches.back().event());
  // Chunk c's last launch: the one before chunk c + 1's first (the kernel sequence repeats).
  const std::size_t per_chunk = a.call.launches.size() / 3;
  ASSERT_EQ(per_chunk * 3, a.call.launches.size());
  for (int call = 0; call < 2; ++call) {  // the second call runs after the first with no wait list
    const DeviceResult b = run_topk(without, config.output, x, ids, weights, tokens);
    const DeviceResult c = run_topk(ends, config.output, x, ids, weights, tokens);
    ASSERT_EQ(a.call.launches.size(), b.call.launches.size());
    ASSERT_EQ(a.call.launches.size(), c.call.launches.size());
    for (std::size_t i = 0; i < b.call.launches.size(); ++i) {
      EXPECT_EQ(a.call.launches[i].kernel, b.call.launches[i].kernel) << i;
      EXPECT_EQ(a.call.launches[i].kernel, c.call.launches[i].kernel) << i;
      const bool chunk_end = (i + 1) % per_chunk == 0;
      EXPECT_EQ(b.call.launches[i].event() != nullptr, chunk_end) << "without profiling, launch " << i;
      EXPECT_EQ(c.call.launches[i].event() != nullptr, chunk_end || i == 0) << "ends, launch " << i;
    }
    EXPECT_EQ(b.call.events().size(), 3u) << "one event a chunk";
    EXPECT_EQ(c.call.events().size(), per_chunk == 1 ? 3u : 4u) << "the first launch and one a chunk";
    ASSERT_NE(b.call.done(), nullptr);
    EXPECT_EQ(b.call.done(), b.call.launches.back().event());
    EXPECT_EQ(c.call.done(), c.call.launches.back().event());
    EXPECT_EQ(c.call.events().front()(), c.call.launches.front().event());
    EXPECT_EQ(b.stats.local_pairs, a.stats.local_pairs);
    ASSERT_EQ(a.fp32.size(), b.fp32.size());
    ASSERT_EQ(a.fp32.size(), c.fp32.size());
    EXPECT_EQ(std::memcmp(a.fp32.data(), b.fp32.data(), a.fp32.size() * 4), 0) << "call " << call;
    EXPECT_EQ(std::memcmp(a.fp32.data(), c.fp32.data(), a.fp32.size() * 4), 0) << "call " << call;
  }
}

// Every launch records its size: work-items, and work-groups of a size that divides them (or 0
// where the driver chose it).
TEST_P(MoeLaunchEventsTest, EveryLaunchRecordsItsSize) {
  const ExpertSpec spec = generic_spec();
  const Fp4Experts experts = make_experts(spec);
  const MoeConfig config = top2_config(GetParam(), Activations::fp4_dynamic);
  MoeLayer layer = MoeLayer::create(test_context(), experts, config);
  const std::int64_t tokens = 5;
  const auto x = make_activations(tokens, spec.hidden, spec.data, 3);
  const auto ids = make_ids(tokens, config.top_k, spec.experts, 4);
  const DeviceResult r = run_topk(layer, config.output, x, ids, make_weights(tokens, config.top_k, 5), tokens);
  ASSERT_FALSE(r.call.launches.empty());
  for (const MoeLaunch& l : r.call.launches) {
    EXPECT_GT(l.work_items, 0u) << l.kernel;
    if (l.work_group_size == 0) {
      EXPECT_EQ(l.work_groups(), 0u) << l.kernel;
      continue;
    }
    EXPECT_EQ(l.work_items % l.work_group_size, 0u) << l.kernel;
    EXPECT_EQ(l.work_groups() * l.work_group_size, l.work_items) << l.kernel;
  }
}

// The routed chunks' FC2 of a work-group a token (moe_mma.cl, MMA_TOKEN_SUM) launches a
// work-group for each (token, block of 16 · MMA_RT · MMA_MT rows of H), each of 32 · MMA_RT work-items
// a pair of the token's top_k: T · H / (16 · RT · row tiles a warp) work-groups, as the kernel reads
// its grid. What bench --launches prints beside each command.
TEST(MoeLaunchSizes, TheTokenFc2HasAWorkGroupATokenAndBlockOfRows) {
  const std::int64_t H = 256, T = 2;
  const int k = 2;
  const Fp4Experts experts = make_experts({WeightFormat::nvfp4, 32, H, 64, Data::generic, 7});
  for (const int warp_tiles : {1, 2, 4}) {
    SCOPED_TRACE(warp_tiles);
    ScopedEnv env("FP4CL_MOE_TILES", "mma.token_fc2_warp_tiles=" + std::to_string(warp_tiles));
    const MoeConfig config = top2_config("mma", Activations::bf16);
    ASSERT_EQ(config.top_k, k);
    LogCapture log;
    MoeLayer layer = MoeLayer::create(test_context(), experts, config);
    // MMA_RT of the token FC2's program, from the program cache's "program FILE with OPTIONS" line.
    std::uint64_t rt = 0;
    for (const std::string& line : log.at(log::Level::debug)) {
      const std::size_t at = line.find("-DMMA_RT=");
      if (line.find("program moe_mma.cl") != std::string::npos && line.find("-DMMA_TOKEN_SUM=1") != std::string::npos &&
          at != std::string::npos)
        rt = std::stoull(line.substr(at + 9));
    }
    ASSERT_GT(rt, 0u) << "no token FC2 built for 4 pairs of 32 experts";
    const DeviceResult r = run_topk(layer, config.output, make_activations(T, H, Data::generic, 8),
                                    make_ids(T, k, 32, 9), make_weights(T, k, 10), T);
    const MoeLaunch& fc2 = r.call.launches.back();
    ASSERT_EQ(fc2.kernel, "moe_mma_fc2");
    EXPECT_EQ(fc2.work_group_size, 32u * k * rt);
    EXPECT_EQ(fc2.work_groups(), static_cast<std::uint64_t>(T * H) / (16 * rt * warp_tiles));
    EXPECT_EQ(fc2.work_items, static_cast<std::uint64_t>(T * k * 2 * H / warp_tiles));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeLaunchEventsTest, ::testing::Values("grouped", "decode", "split", "mma"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace fp4cl::test
