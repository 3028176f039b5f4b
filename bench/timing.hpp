// Timing of repeated calls: warm-up calls first (the first launch of a kernel with a new local
// size compiles it on PoCL), then timed calls, each measured twice: from OpenCL event profiling
// (the start of its first command to the end of its last) and by the host's wall clock (from
// before the enqueue to the end of a queue finish). Median and minimum of each, and the median
// host time of the enqueue alone (setting arguments and enqueueing the commands).
#pragma once

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

struct Timing {
  double median_us = 0.0, min_us = 0.0;            // event profiling
  double wall_median_us = 0.0, wall_min_us = 0.0;  // host wall clock
  double enqueue_median_us = 0.0;                   // host time inside enqueue (before the finish)
  int iterations = 0;
  std::vector<CommandTiming> commands;  // per command, when every call enqueued the same number
};

// `enqueue(i)` enqueues call i (i counts warm-up calls too, so that callers can rotate inputs)
// and returns the events of its commands in order. The queue is finished after each call.
using EnqueueCall = std::function<std::vector<cl::Event>(int)>;
Timing time_calls(const Context& ctx, int warmup, int iterations, const EnqueueCall& enqueue);

// Prints `t.commands` on stderr, one line per command, named by `names` where given.
void print_commands(const std::string& label, const Timing& t, const std::vector<std::string>& names);

// The median of `values` (sorted copy; the upper middle for an even count).
double median(std::vector<double> values);

}  // namespace fp4cl::bench
