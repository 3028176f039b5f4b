#include "timing.hpp"

#include <algorithm>

#include "support/check.hpp"

namespace fp4cl::cli {

double events_microseconds(const std::vector<cl::Event>& events) {
  if (events.empty()) return 0.0;
  cl_ulong start = 0, end = 0;
  check_cl(events.front().getProfilingInfo(CL_PROFILING_COMMAND_START, &start), "reading a profiling start time");
  check_cl(events.back().getProfilingInfo(CL_PROFILING_COMMAND_END, &end), "reading a profiling end time");
  return static_cast<double>(end - start) * 1e-3;
}

double median_microseconds(const Context& ctx, int warmup, int runs,
                           const std::function<std::vector<cl::Event>()>& call) {
  if (!ctx.profiling_enabled()) fail("the command queue records no profiling times; timing needs them");
  if (runs < 1) fail("timing needs at least one run, got {}", runs);
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    const std::vector<cl::Event> events = call();
    check_cl(ctx.queue().finish(), "waiting for a timed call");
    us.push_back(events_microseconds(events));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace fp4cl::cli
