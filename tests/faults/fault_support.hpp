// Helpers of the fault-injection and limit tests: the error an injected fault must produce, and a
// check that every buffer allocated in a scope is gone at its end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "cl/fault_injection.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"

namespace fp4cl::test {

// What a call threw: whether it threw fp4cl::Error, its message and status.
struct Thrown {
  bool threw = false;
  std::string message;
  int status = 0;
};

inline Thrown thrown_by(const std::function<void()>& f) {
  Thrown t;
  try {
    f();
  } catch (const Error& e) {
    t.threw = true;
    t.message = e.what();
    t.status = e.cl_status();
  }
  return t;
}

// An injected fault must surface as fp4cl::Error carrying the injected status, its name, and the
// operation that failed.
inline ::testing::AssertionResult is_clear_fault_error(const Thrown& t, int status) {
  if (!t.threw) return ::testing::AssertionFailure() << "no fp4cl::Error was thrown";
  if (t.status != status)
    return ::testing::AssertionFailure() << "status " << t.status << " instead of " << status << ": " << t.message;
  if (t.message.find(cl_status_name(status)) == std::string::npos)
    return ::testing::AssertionFailure() << "the message does not name " << cl_status_name(status) << ": " << t.message;
  for (const char* op :
       {"enqueueing", "copying", "reading", "writing", "resetting", "allocating", "building", "creating"})
    if (t.message.find(op) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the message names no operation: " << t.message;
}

// Counts the buffers fp4cl allocates from construction on; live() is how many of them are still
// alive once the queue has drained (the driver destroys a buffer when its last use is over).
class BufferCount {
 public:
  explicit BufferCount(const Context& ctx) : ctx_(ctx) {
    ctx_.queue().finish();
    fault_injection::count_buffers(true);
    base_ = fault_injection::live_buffers();
  }
  ~BufferCount() { fault_injection::count_buffers(false); }
  // The buffers live now, given time to reach `expected` (compare the result with it).
  std::int64_t live(std::int64_t expected = 0) const {
    ctx_.queue().finish();
    // Destructor callbacks may run on a driver thread shortly after the release.
    // (PoCL may run them seconds late while it compiles kernels for a new launch shape.) Waiting
    // for the expected count, not for none: a count of live buffers returns at once.
    for (int i = 0; i < 3000 && fault_injection::live_buffers() - base_ != expected; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return fault_injection::live_buffers() - base_;
  }

 private:
  const Context& ctx_;
  std::int64_t base_ = 0;
};

}  // namespace fp4cl::test
