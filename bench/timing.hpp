// Timing of repeated calls: warm-up calls first (the first launch of a kernel with a new local
// size compiles it on PoCL; and on the 2-vCPU VMs the CI runs on, the first tens of ms of calls
// after the process sat idle or ran host code are slow: see Warmup), then timed calls, each
// measured twice: from OpenCL event profiling
// (the start of its first command to the end of its last) and by the host's wall clock (from
// before the enqueue to the end of a queue finish). Median and minimum of each, and the median
// host time of the enqueue alone (setting arguments and enqueueing the commands).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"

namespace fp4cl::bench {

// One command of a call: medians over the timed calls of its start (from the start of the
// call's first command) and of its duration, from event profiling.
struct CommandTiming {
  double start_us = 0.0, duration_us = 0.0;
};

// How a row warms up: at least `calls` calls, and calls until `ms` milliseconds have passed since
// the first. Measured on the CI machine (a 2-vCPU Intel Xeon VM under PoCL, 2026-11-27): a MoE
// decode call (qwen3-30b-a3b, T = 1) takes 2-3.6 ms for its first ~30 calls after the layer's
// creation or after 3 s of sleep (300 ms of sleep: 1.2-1.9 ms), then ~1.0 ms, with the weights
// rotated as before; perf shows both PoCL threads in the same kernels throughout and no page
// faults, so it is the machine warming up, not the cache. Linear decode calls showed none of it.
struct Warmup {
  int calls = 0;
  double ms = 0.0;
};
// Whether the warm-up makes another call after `calls_made` calls and `elapsed_ms` milliseconds.
bool warms_up(const Warmup& warmup, int calls_made, double elapsed_ms);
// `warmup` with at least one call per copy of the weights that the calls rotate over (PoCL
// compiles a kernel at its first launch with each copy's arguments).
Warmup per_copy(Warmup warmup, std::size_t copies);

struct Timing {
  int warmup_calls = 0;                             // the untimed calls that ran first
  double median_us = 0.0, min_us = 0.0;            // event profiling
  double wall_median_us = 0.0, wall_min_us = 0.0;  // host wall clock
  double enqueue_median_us = 0.0;                   // host time inside enqueue (before the finish)
  int iterations = 0;
  std::vector<CommandTiming> commands;  // per command, when every call enqueued the same number
};

// `enqueue(i)` enqueues call i (i counts warm-up calls too, so that callers can rotate inputs)
// and returns the events of its commands in order. The queue is finished after each call.
using EnqueueCall = std::function<std::vector<cl::Event>(int)>;
Timing time_calls(const Context& ctx, Warmup warmup, int iterations, const EnqueueCall& enqueue);

// Prints `t.commands` on stderr, one line per command, named by `names` where given.
void print_commands(const std::string& label, const Timing& t, const std::vector<std::string>& names);

// The median of `values` (sorted copy; the upper middle for an even count).
double median(std::vector<double> values);

}  // namespace fp4cl::bench
