// Launch events (include/fp4cl/moe.hpp, MoeLaunchEvents): on a queue that records no profiling
// times a call's commands get no events but each chunk's last one (an event costs host time: ~7 µs
// a launch on NVIDIA's OpenCL, bench/standalone/enqueue_costs.c), whose event is the call's
// `done`; on a profiling queue the call's first command gets one too (MoeLaunchEvents::ends, the
// default), or every launch (MoeLaunchEvents::every). The outputs are the same bits in every case,
// and consecutive calls on the non-profiling queue (no wait lists between them: the queue is in
// order) give the same bits as on the profiling one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "moe_test_support.hpp"

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

class MoeLaunchEventsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLaunchEventsTest, WhichLaunchesGetEvents) {
  const Context& profiled = test_context();
  ASSERT_TRUE(profiled.profiling_enabled());
  PlainQueue plain_queue(profiled);
  ASSERT_NE(plain_queue.queue, nullptr);
  const Context plain = Context::wrap(profiled.opencl_context()(), plain_queue.queue);
  ASSERT_FALSE(plain.profiling_enabled());

  ExpertSpec spec;
  spec.data = Data::generic;
  const Fp4Experts experts = make_experts(spec);
  MoeConfig config;
  config.scheme = QuantScheme{WeightFormat::nvfp4, Activations::bf16};
  config.top_k = 2;
  config.kernel = GetParam();
  config.output = MoeOutput::fp32;
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

INSTANTIATE_TEST_SUITE_P(Strategies, MoeLaunchEventsTest, ::testing::Values("grouped", "decode", "split", "mma"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace fp4cl::test
