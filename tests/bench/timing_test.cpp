// The benchmark's timing loop (bench/timing.hpp): the warm-up runs at least Warmup::calls calls
// and keeps calling until Warmup::ms have passed; the timed calls follow, their indices
// continuing (callers rotate inputs by index), and every timed call is in the statistics.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "timing.hpp"

namespace fp4cl::bench {
namespace {

// A call that enqueues one marker and, before it, sleeps `sleep_ms` on the host.
EnqueueCall marker_call(const Context& ctx, std::vector<int>& indices, int sleep_ms) {
  return [&ctx, &indices, sleep_ms](int i) {
    indices.push_back(i);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    cl::Event e;
    if (ctx.queue().enqueueMarkerWithWaitList(nullptr, &e) != CL_SUCCESS) throw Error("enqueueing a marker");
    return std::vector<cl::Event>{e};
  };
}

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

TEST(TimeCalls, WarmupCountsCallsWhenNoTimeIsAsked) {
  Context ctx = Context::create();
  std::vector<int> indices;
  const Timing t = time_calls(ctx, Warmup{3, 0.0}, 4, marker_call(ctx, indices, 0));
  EXPECT_EQ(t.warmup_calls, 3);
  EXPECT_EQ(t.iterations, 4);
  EXPECT_EQ(indices, iota(7));
  ASSERT_EQ(t.commands.size(), 1u);
}

TEST(TimeCalls, WarmupKeepsCallingUntilItsTimeHasPassed) {
  Context ctx = Context::create();
  std::vector<int> indices;
  // 5 ms a call and 60 ms of warm-up: at least 12 warm-up calls, though 1 was asked.
  const auto t0 = std::chrono::steady_clock::now();
  const Timing t = time_calls(ctx, Warmup{1, 60.0}, 2, marker_call(ctx, indices, 5));
  const double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(t.warmup_calls, 12);
  EXPECT_GE(elapsed_ms, 60.0);
  EXPECT_EQ(indices, iota(t.warmup_calls + 2));
  // A warm-up of calls longer than its time: the calls decide.
  indices.clear();
  const Timing u = time_calls(ctx, Warmup{4, 1.0}, 1, marker_call(ctx, indices, 2));
  EXPECT_EQ(u.warmup_calls, 4);
  EXPECT_EQ(indices, iota(5));
}

TEST(TimeCalls, RefusesNoTimedCalls) {
  Context ctx = Context::create();
  std::vector<int> indices;
  EXPECT_THROW(time_calls(ctx, Warmup{0, 0.0}, 0, marker_call(ctx, indices, 0)), Error);
  EXPECT_TRUE(indices.empty());
}

}  // namespace
}  // namespace fp4cl::bench
