#include "fp4cl/context.hpp"

#include "cl/fault_injection.hpp"
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
  std::shared_ptr<ProgramCache> programs;  // shared by with_new_queue() copies
};

Context::Context(std::shared_ptr<State> state) : state_(std::move(state)) {}

Context Context::create() { return create(device_selector_from_env()); }

Context Context::create(std::string_view selector) {
  fault_injection::arm_from_env_once();
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
  state->programs = std::make_shared<ProgramCache>(state->context, state->device, state->info,
                                                   ProgramCache::disk_dir_for(state->info));
  log::info("device {}", state->info.describe());
  return Context(std::move(state));
}

Context Context::wrap(::cl_context context, ::cl_command_queue queue) {
  fault_injection::arm_from_env_once();
  if (!context) fail("Context::wrap: the cl_context is null");
  if (!queue) fail("Context::wrap: the cl_command_queue is null");
  // Everything is checked before fp4cl takes a reference, so a refused pair leaves the caller's
  // objects exactly as they were.
  ::cl_context queue_context = nullptr;
  check_cl(::clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof queue_context, &queue_context, nullptr),
           "Context::wrap: querying the context of the cl_command_queue (is it a valid queue?)");
  if (queue_context != context)
    fail("Context::wrap: the cl_command_queue belongs to another cl_context than the one given");
  cl_command_queue_properties properties = 0;
  check_cl(::clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof properties, &properties, nullptr),
           "Context::wrap: querying the properties of the cl_command_queue");
  if (properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    fail("Context::wrap: the cl_command_queue is out-of-order; fp4cl enqueues dependent kernels in sequence "
         "and needs an in-order queue");
  ::cl_device_id device = nullptr;
  check_cl(::clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof device, &device, nullptr),
           "Context::wrap: querying the device of the cl_command_queue");

  auto state = std::make_shared<State>();
  // fp4cl's own references, each released once by its cl:: wrapper when the last copy of this
  // Context (and of any program or kernel built through it) is gone.
  check_cl(::clRetainContext(context), "Context::wrap: retaining the cl_context");
  state->context = cl::Context(context, /*retainObject=*/false);  // adopts the reference just taken
  check_cl(::clRetainCommandQueue(queue), "Context::wrap: retaining the cl_command_queue");
  state->queue = cl::CommandQueue(queue, /*retainObject=*/false);
  state->device = cl::Device(device, /*retainObject=*/true);  // a no-op for root devices
  state->profiling = (properties & CL_QUEUE_PROFILING_ENABLE) != 0;
  state->info = query_device_info(state->device);
  state->programs = std::make_shared<ProgramCache>(state->context, state->device, state->info,
                                                   ProgramCache::disk_dir_for(state->info));
  log::info("device {} (wrapped context)", state->info.describe());
  return Context(std::move(state));
}

Context Context::with_new_queue() const {
  auto state = std::make_shared<State>(*state_);
  cl_int err = CL_SUCCESS;
  state->queue = cl::CommandQueue(state->context, state->device,
                                  state->profiling ? CL_QUEUE_PROFILING_ENABLE : cl_command_queue_properties{0}, &err);
  check_cl(err, "creating another command queue on {}", state->info.name);
  return Context(std::move(state));
}

const cl::Context& Context::opencl_context() const { return state_->context; }
const cl::Device& Context::device() const { return state_->device; }
const cl::CommandQueue& Context::queue() const { return state_->queue; }
const DeviceInfo& Context::info() const { return state_->info; }
bool Context::profiling_enabled() const { return state_->profiling; }
ProgramCache& Context::programs() const { return *state_->programs; }

}  // namespace fp4cl
