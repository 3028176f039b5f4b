// Host-side parallel loops for the one-time weight preparation (layouts built at load): the
// work split into contiguous ranges, one a thread, the caller's thread taking the first.
#pragma once

#include <cstdint>
#include <functional>

namespace fp4cl {

// Threads for host-side preparation: FP4CL_HOST_THREADS (1 .. 256) where set, else the hardware's
// concurrency, at most 16. An fp4cl::Error names the variable when its value is not such a number.
int host_threads();

// Runs body(begin, end) over contiguous ranges covering [0, n) on up to host_threads() threads,
// each range holding at least 1 MiB of the work's bytes (`item_bytes` an item: the FP4 codes a
// layout reads for it), so that small jobs stay on the caller's thread. Returns when every range
// has finished; an exception from a range is rethrown then, the one from the lowest range where
// several threw (so the error is the one a single thread would have met first, when each range
// stops at its first).
void parallel_ranges(std::int64_t n, std::int64_t item_bytes,
                     const std::function<void(std::int64_t begin, std::int64_t end)>& body);

}  // namespace fp4cl
