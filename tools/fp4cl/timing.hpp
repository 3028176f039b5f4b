// Kernel timing for the CLI from OpenCL event profiling (the context's queue records it).
#pragma once

#include <functional>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl::cli {

// Microseconds from the start of the first event to the end of the last.
double events_microseconds(const std::vector<cl::Event>& events);

// The median over `runs` calls, after `warmup` calls, of one call's time: `call` enqueues and
// completes one call and returns its commands' events in enqueue order. Throws when the queue
// does not record profiling times.
double median_microseconds(const Context& ctx, int warmup, int runs,
                           const std::function<std::vector<cl::Event>()>& call);

}  // namespace fp4cl::cli
