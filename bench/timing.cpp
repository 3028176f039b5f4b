#include "timing.hpp"

#include <algorithm>
#include <chrono>

#include "fp4cl/error.hpp"

namespace fp4cl::bench {

namespace {

double profiling_ns(const cl::Event& e, cl_profiling_info what) {
  cl_ulong t = 0;
  const cl_int err = e.getProfilingInfo(what, &t);
  if (err != CL_SUCCESS) throw Error("reading an event's profiling time (is profiling enabled on the queue?)", err);
  return static_cast<double>(t);
}

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Timing time_calls(const Context& ctx, int warmup, int iterations, const EnqueueCall& enqueue) {
  if (!ctx.profiling_enabled()) throw Error("the benchmark's queue has no profiling enabled");
  if (iterations < 1) throw Error("at least one timed iteration is needed");
  std::vector<double> events, walls;
  for (int i = 0; i < warmup + iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<cl::Event> ev = enqueue(i);
    const cl_int err = ctx.queue().finish();
    const auto t1 = std::chrono::steady_clock::now();
    if (err != CL_SUCCESS) throw Error("finishing the benchmark queue", err);
    if (i < warmup) continue;
    if (ev.empty()) throw Error("a benchmarked call enqueued no command");
    events.push_back((profiling_ns(ev.back(), CL_PROFILING_COMMAND_END) -
                      profiling_ns(ev.front(), CL_PROFILING_COMMAND_START)) * 1e-3);
    walls.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Timing t;
  t.iterations = iterations;
  t.median_us = median(events);
  t.min_us = *std::min_element(events.begin(), events.end());
  t.wall_median_us = median(walls);
  t.wall_min_us = *std::min_element(walls.begin(), walls.end());
  return t;
}

}  // namespace fp4cl::bench
