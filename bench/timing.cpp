#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

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

bool warms_up(const Warmup& warmup, int calls_made, double elapsed_ms) {
  return calls_made < warmup.calls || elapsed_ms < warmup.ms;
}

Warmup per_copy(Warmup warmup, std::size_t copies) {
  warmup.calls = std::max(warmup.calls, static_cast<int>(copies));
  return warmup;
}

Timing time_calls(const Context& ctx, Warmup warmup, int iterations, const EnqueueCall& enqueue) {
  if (!ctx.profiling_enabled()) throw Error("the benchmark's queue has no profiling enabled");
  if (iterations < 1) throw Error("at least one timed iteration is needed");
  int i = 0;
  const auto w0 = std::chrono::steady_clock::now();
  while (warms_up(warmup, i, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count())) {
    enqueue(i++);
    const cl_int err = ctx.queue().finish();
    if (err != CL_SUCCESS) throw Error("finishing the benchmark queue", err);
  }
  const int timed_from = i;
  std::vector<double> events, walls, enqueues;
  std::vector<std::vector<double>> starts, durations;  // [command][call]
  bool same_commands = true;
  for (; i < timed_from + iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<cl::Event> ev = enqueue(i);
    const auto t_enqueued = std::chrono::steady_clock::now();
    const cl_int err = ctx.queue().finish();
    const auto t1 = std::chrono::steady_clock::now();
    if (err != CL_SUCCESS) throw Error("finishing the benchmark queue", err);
    if (ev.empty()) throw Error("a benchmarked call enqueued no command");
    const double first = profiling_ns(ev.front(), CL_PROFILING_COMMAND_START);
    events.push_back((profiling_ns(ev.back(), CL_PROFILING_COMMAND_END) - first) * 1e-3);
    if (starts.empty()) {
      starts.resize(ev.size());
      durations.resize(ev.size());
    }
    if (ev.size() != starts.size()) same_commands = false;
    for (std::size_t c = 0; same_commands && c < ev.size(); ++c) {
      const double start = profiling_ns(ev[c], CL_PROFILING_COMMAND_START);
      starts[c].push_back((start - first) * 1e-3);
      durations[c].push_back((profiling_ns(ev[c], CL_PROFILING_COMMAND_END) - start) * 1e-3);
    }
    walls.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    enqueues.push_back(std::chrono::duration<double, std::micro>(t_enqueued - t0).count());
  }
  Timing t;
  t.warmup_calls = timed_from;
  t.iterations = iterations;
  t.median_us = median(events);
  t.min_us = *std::min_element(events.begin(), events.end());
  t.wall_median_us = median(walls);
  t.wall_min_us = *std::min_element(walls.begin(), walls.end());
  t.enqueue_median_us = median(enqueues);
  if (same_commands)
    for (std::size_t c = 0; c < starts.size(); ++c) t.commands.push_back({median(starts[c]), median(durations[c])});
  return t;
}

void print_commands(const std::string& label, const Timing& t, const std::vector<std::string>& names) {
  std::string text = fmt::format(
      "{}: {:.1f} us from the first command's start to the last one's end ({} timed calls after {} warm-up calls)\n",
      label, t.median_us, t.iterations, t.warmup_calls);
  double busy = 0.0;
  for (std::size_t c = 0; c < t.commands.size(); ++c) {
    const CommandTiming& ct = t.commands[c];
    busy += ct.duration_us;
    text += fmt::format("  {:>9.1f} us +{:>8.1f} us  {}\n", ct.start_us, ct.duration_us,
                        c < names.size() ? names[c] : fmt::format("command {}", c));
  }
  if (t.commands.empty()) text += "  (calls enqueued different numbers of commands: no breakdown)\n";
  else text += fmt::format("  busy {:.1f} us, between commands {:.1f} us\n", busy, t.median_us - busy);
  text += fmt::format("  host: {:.1f} us enqueueing, {:.1f} us wall per call (median)\n", t.enqueue_median_us,
                      t.wall_median_us);
  std::fputs(text.c_str(), stderr);
}

}  // namespace fp4cl::bench
