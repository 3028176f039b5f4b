#include "fp4cl/context.hpp"

#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

struct Context::State {
  cl::Context context;
  cl::Device device;
  cl::CommandQueue queue;
  DeviceInfo info;
  bool profiling = false;
  std::unique_ptr<ProgramCache> programs;
};

Context::Context(std::shared_ptr<State> state) : state_(std::move(state)) {}

Context Context::create() { return create(device_selector_from_env()); }

Context Context::create(std::string_view selector) {
  SelectedDevice selected = select_device(selector);
  auto state = std::make_shared<State>();
  state->device = selected.device;
  state->info = std::move(selected.info);
  cl_int err = CL_SUCCESS;
  state->context = cl::Context(state->device, nullptr, nullptr, nullptr, &err);
  check_cl(err, "creating an OpenCL context on {}", state->info.name);
  state->queue = cl::CommandQueue(state->context, state->device, CL_QUEUE_PROFILING_ENABLE, &err);
  check_cl(err, "creating a command queue on {}", state->info.name);
  state->profiling = true;
  state->programs = std::make_unique<ProgramCache>(state->context, state->device, state->info,
                                                   ProgramCache::disk_dir_from_env());
  log::info("device {}", state->info.describe());
  return Context(std::move(state));
}

Context Context::wrap(::cl_context context, ::cl_command_queue queue) {
  if (!context) fail("Context::wrap: the cl_context is null");
  if (!queue) fail("Context::wrap: the cl_command_queue is null");
  auto state = std::make_shared<State>();
  // retainObject = true: fp4cl takes its own references and releases only those.
  state->context = cl::Context(context, true);
  state->queue = cl::CommandQueue(queue, true);
  cl_int err = CL_SUCCESS;
  const ::cl_context queue_context = state->queue.getInfo<CL_QUEUE_CONTEXT>(&err)();
  check_cl(err, "Context::wrap: querying the queue's context");
  if (queue_context != context) fail("Context::wrap: the command queue belongs to another cl_context");
  state->device = state->queue.getInfo<CL_QUEUE_DEVICE>(&err);
  check_cl(err, "Context::wrap: querying the queue's device");
  const cl_command_queue_properties props = state->queue.getInfo<CL_QUEUE_PROPERTIES>(&err);
  check_cl(err, "Context::wrap: querying the queue's properties");
  state->profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
  state->info = query_device_info(state->device);
  state->programs = std::make_unique<ProgramCache>(state->context, state->device, state->info,
                                                   ProgramCache::disk_dir_from_env());
  return Context(std::move(state));
}

const cl::Context& Context::opencl_context() const { return state_->context; }
const cl::Device& Context::device() const { return state_->device; }
const cl::CommandQueue& Context::queue() const { return state_->queue; }
const DeviceInfo& Context::info() const { return state_->info; }
bool Context::profiling_enabled() const { return state_->profiling; }
ProgramCache& Context::programs() const { return *state_->programs; }

}  // namespace fp4cl
