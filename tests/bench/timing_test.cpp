// The benchmark's timing loop (bench/timing.hpp): the warm-up runs at least Warmup::calls calls
// and keeps calling until Warmup::ms have passed (warms_up decides, tested on given times); the
// timed calls follow, their indices continuing (callers rotate inputs by index), and every timed
// call is in the statistics.
#include <gtest/gtest.h>

#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "timing.hpp"

namespace fp4cl::bench {
namespace {

// A call that records its index and enqueues one marker.
EnqueueCall marker_call(const Context& ctx, std::vector<int>& indices) {
  return [&ctx, &indices](int i) {
    indices.push_back(i);
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

TEST(TimeCalls, WarmupGoesOnUntilBothItsCallsAndItsTimeAreDone) {
  const Warmup calls_and_time{1, 60.0};
  EXPECT_TRUE(warms_up(calls_and_time, 0, 0.0));
  EXPECT_TRUE(warms_up(calls_and_time, 1, 59.9)) << "the asked call made, its time not yet passed";
  EXPECT_TRUE(warms_up(calls_and_time, 12, 59.9));
  EXPECT_FALSE(warms_up(calls_and_time, 1, 60.0));
  EXPECT_FALSE(warms_up(calls_and_time, 12, 61.0));
  const Warmup calls_longer_than_time{4, 1.0};
  EXPECT_TRUE(warms_up(calls_longer_than_time, 3, 100.0)) << "the time passed, a call still owed";
  EXPECT_FALSE(warms_up(calls_longer_than_time, 4, 100.0));
  EXPECT_FALSE(warms_up(Warmup{0, 0.0}, 0, 0.0)) << "no warm-up asked";
}

TEST(TimeCalls, WarmupMakesAtLeastOneCallPerWeightCopy) {
  const Warmup three = per_copy(Warmup{1, 60.0}, 3);
  EXPECT_EQ(three.calls, 3);
  EXPECT_EQ(three.ms, 60.0);
  EXPECT_EQ(per_copy(Warmup{5, 0.0}, 2).calls, 5) << "more calls asked than copies";
}

TEST(TimeCalls, WarmupCountsCallsWhenNoTimeIsAsked) {
  Context ctx = Context::create();
  std::vector<int> indices;
  const Timing t = time_calls(ctx, Warmup{3, 0.0}, 4, marker_call(ctx, indices));
  EXPECT_EQ(t.warmup_calls, 3);
  EXPECT_EQ(t.iterations, 4);
  EXPECT_EQ(indices, iota(7));
  ASSERT_EQ(t.commands.size(), 1u);
}

TEST(TimeCalls, TimedCallsFollowATimedWarmupWithTheirIndicesContinuing) {
  Context ctx = Context::create();
  std::vector<int> indices;
  const Timing t = time_calls(ctx, Warmup{1, 20.0}, 2, marker_call(ctx, indices));
  EXPECT_GE(t.warmup_calls, 1);
  EXPECT_EQ(t.iterations, 2);
  EXPECT_EQ(indices, iota(t.warmup_calls + 2));
}

TEST(TimeCalls, RefusesNoTimedCalls) {
  Context ctx = Context::create();
  std::vector<int> indices;
  EXPECT_THROW(time_calls(ctx, Warmup{0, 0.0}, 0, marker_call(ctx, indices)), Error);
  EXPECT_TRUE(indices.empty());
}

}  // namespace
}  // namespace fp4cl::bench
