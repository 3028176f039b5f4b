// Test-only fault injection into the OpenCL calls fp4cl makes (every one of them goes through
// host/cl/opencl_calls.hpp, which consults this hook). Off by default: while nothing is armed a
// call costs one relaxed atomic load.
//
// Armed, the hook counts the calls of the chosen kinds (buffer allocations, program builds,
// enqueues: kernel launch, read, write, fill, copy, map, marker) from 1 and makes call `at` fail
// with `status` instead of reaching the driver (and, with `every` > 0, every `every`-th call
// after it). Tests arm it through Scope; the soak tool through the environment variable
//
//   FP4CL_FAULT_INJECT="calls=enqueue+allocate,at=100,every=1000,status=CL_OUT_OF_RESOURCES"
//
// (keys optional: calls = all, at = 1, every = 0, status = CL_OUT_OF_RESOURCES; `status` is a
// CL_* name or a negative number), read when the first Context is made.
//
// Two test aids live here too: a pretended CL_DEVICE_MAX_MEM_ALLOC_SIZE (smaller than the
// device's, to test tensors beyond the largest allocation on a device that has room), and a count
// of the buffers alive that were allocated while counting was on (a leak check that needs no
// driver support beyond clSetMemObjectDestructorCallback).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace fp4cl::fault_injection {

enum Call : unsigned {
  allocate = 1u,  // buffer allocation
  build = 2u,     // program build (from source or from a cached binary)
  enqueue = 4u,   // kernel launch, read, write, fill, copy, map, marker
};
constexpr unsigned kAllCalls = allocate | build | enqueue;

struct Plan {
  unsigned calls = kAllCalls;  // the kinds of call counted (and failed)
  std::int64_t at = 0;         // the counted call that fails first (1-based); 0 = count only
  std::int64_t every = 0;      // > 0: every `every`-th counted call after `at` fails too
  int status = -5;             // CL_OUT_OF_RESOURCES
};

// Arms `plan`, resetting the counters. Throws fp4cl::Error for a negative `at` or `every`, an
// empty `calls` or a non-negative status.
void arm(const Plan& plan);
void disarm();

// The counters since the last arm().
std::int64_t calls_counted();
std::int64_t faults_injected();

// Parses an FP4CL_FAULT_INJECT value. Throws fp4cl::Error naming the bad item.
Plan parse_plan(const std::string& spec);
// Arms the plan FP4CL_FAULT_INJECT holds, the first time it is called in the process (later
// calls do nothing). Context::create and Context::wrap call it.
void arm_from_env_once();

// The largest allocation fp4cl pretends the device allows (0 = the device's own).
void set_max_alloc_bytes(std::uint64_t bytes);
std::uint64_t max_alloc_bytes_override();

// Live-buffer counting: buffers allocated while counting is on are counted until the driver
// destroys them. Call clFinish on the queues first: a buffer lives while commands use it.
void count_buffers(bool on);
std::int64_t live_buffers();

// Arms a plan for a scope (tests). Restores "off" (and no max-alloc override) at its end.
class Scope {
 public:
  explicit Scope(const Plan& plan) { arm(plan); }
  ~Scope() {
    disarm();
    set_max_alloc_bytes(0);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

namespace detail {
extern std::atomic<bool> g_armed;
int on_call_slow(Call kind);
bool counting_buffers();
void buffer_created();
void buffer_destroyed();
}  // namespace detail

// The status the next call of `kind` must fail with, or 0 (CL_SUCCESS) to make it for real.
// For host/cl/opencl_calls.cpp only.
inline int on_call(Call kind) {
  if (!detail::g_armed.load(std::memory_order_relaxed)) return 0;
  return detail::on_call_slow(kind);
}

// What a kind of call is called in messages ("buffer allocation").
const char* to_string(Call kind);

}  // namespace fp4cl::fault_injection
