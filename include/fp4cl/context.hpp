// A Context is the device, OpenCL context, command queue and program cache fp4cl works with.
// It is cheap to copy (shared state). It either owns its OpenCL objects or wraps the ones a
// serving runtime already has.
//
// Thread safety (README "Thread safety"): a Context and its copies may be used from any number of
// threads at once; its program cache is thread-safe (a program is built once, concurrent requests
// wait for it). Layers are not: give each thread its own queue (with_new_queue()) and its own
// layer on that queue (MoeLayer::with_context() shares the prepared weights of an existing layer).
#pragma once

#include <memory>
#include <string_view>

#include "fp4cl/device.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

class ProgramCache;

class Context {
 public:
  // Creates a context and an in-order queue (with profiling enabled) on the device that
  // `selector` picks (see select_device). create() uses FP4CL_DEVICE, else the default device.
  static Context create();
  static Context create(std::string_view selector);

  // Wraps a context and queue the caller owns. fp4cl retains both for as long as it uses them
  // and releases only what it retained. The queue's device is the device fp4cl runs on; the
  // queue must be in-order and belong to `context`. Throws fp4cl::Error (taking no reference)
  // for a null handle, a queue of another context or an out-of-order queue.
  static Context wrap(::cl_context context, ::cl_command_queue queue);

  // A Context on the same OpenCL context, device and program cache (programs built through either
  // serve both) with a new in-order queue of its own, fp4cl-owned, with profiling when this
  // context's queue has it. Buffers and layers' weights of one are valid in the other. For
  // several threads, or several streams of work that must not wait for each other.
  Context with_new_queue() const;

  const cl::Context& opencl_context() const;
  const cl::Device& device() const;
  const cl::CommandQueue& queue() const;
  const DeviceInfo& info() const;
  bool profiling_enabled() const;  // true when the queue records event timestamps
  ProgramCache& programs() const;

 private:
  struct State;
  explicit Context(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fp4cl
