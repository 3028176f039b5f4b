// Context::create on the selected device, and Context::wrap over a context and queue the caller
// made with the C API: fp4cl must retain what it uses and give back exactly what it retained.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "int_kernel.hpp"
#include "memory_sources.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl {
namespace {

cl_uint reference_count(cl_context context) {
  cl_uint n = 0;
  EXPECT_EQ(clGetContextInfo(context, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, nullptr), CL_SUCCESS);
  return n;
}
cl_uint reference_count(cl_command_queue queue) {
  cl_uint n = 0;
  EXPECT_EQ(clGetCommandQueueInfo(queue, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, nullptr), CL_SUCCESS);
  return n;
}

cl_device_id default_device() { return select_device(device_selector_from_env()).device(); }

// A context and queue made with the C API, released when the test is done with them.
struct RawQueue {
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;

  explicit RawQueue(cl_command_queue_properties properties = 0) {
    cl_device_id device = default_device();
    cl_int err = CL_SUCCESS;
    context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
    EXPECT_EQ(err, CL_SUCCESS);
    queue = clCreateCommandQueue(context, device, properties, &err);
    if (err != CL_SUCCESS) queue = nullptr;
  }
  ~RawQueue() { release(); }
  void release() {
    if (queue) clReleaseCommandQueue(queue);
    if (context) clReleaseContext(context);
    queue = nullptr;
    context = nullptr;
  }
  RawQueue(const RawQueue&) = delete;
  RawQueue& operator=(const RawQueue&) = delete;
};

std::string error_of_wrap(cl_context context, cl_command_queue queue) {
  try {
    Context::wrap(context, queue);
    return "no error";
  } catch (const Error& e) {
    return e.what();
  }
}

const char* kIotaSource = R"(
__kernel void iota_plus(__global int* out, int base) {
  out[get_global_id(0)] = base + (int)get_global_id(0);
}
)";

// Builds a small kernel through the context's device and runs it on its queue: the context works.
void expect_runs_a_kernel(const Context& ctx) {
  ProgramCache programs(ctx.opencl_context(), ctx.device(), ctx.info(), "",
                        test::memory_sources({{"iota.cl", kIotaSource}}));
  const std::vector<cl_int> out = test::run_int_kernel(ctx, programs.kernel("iota.cl", "iota_plus"), 4, cl_int{100});
  EXPECT_EQ(out, (std::vector<cl_int>{100, 101, 102, 103}));
}

TEST(ContextCreate, UsesTheSelectedDeviceWithAProfilingInOrderQueue) {
  const Context ctx = Context::create();
  EXPECT_EQ(ctx.info().name, select_device(device_selector_from_env()).info.name);
  EXPECT_EQ(ctx.queue().getInfo<CL_QUEUE_DEVICE>()(), ctx.device()());
  EXPECT_EQ(ctx.queue().getInfo<CL_QUEUE_CONTEXT>()(), ctx.opencl_context()());
  const cl_command_queue_properties props = ctx.queue().getInfo<CL_QUEUE_PROPERTIES>();
  EXPECT_TRUE(props & CL_QUEUE_PROFILING_ENABLE);
  EXPECT_FALSE(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
  EXPECT_TRUE(ctx.profiling_enabled());
  expect_runs_a_kernel(ctx);
}

TEST(ContextCreate, HonoursFP4CL_DEVICE) {
  const auto devices = list_devices();
  ASSERT_FALSE(devices.empty());
  const DeviceInfo& last = devices.back();
  {
    test::ScopedEnv env("FP4CL_DEVICE", std::to_string(last.platform_index) + ":" + std::to_string(last.device_index));
    const Context ctx = Context::create();
    EXPECT_EQ(ctx.info().platform_index, last.platform_index);
    EXPECT_EQ(ctx.info().device_index, last.device_index);
    EXPECT_EQ(ctx.info().name, last.name);
  }
  test::ScopedEnv env("FP4CL_DEVICE", "no-such-opencl-device-xyz");
  try {
    Context::create();
    FAIL() << "Context::create did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-opencl-device-xyz'"), std::string::npos) << e.what();
  }
}

TEST(ContextCreate, CopiesShareOneState) {
  const Context a = Context::create();
  const Context b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the test
  EXPECT_EQ(&a.programs(), &b.programs());
  EXPECT_EQ(a.queue()(), b.queue()());
}

TEST(ContextNewQueue, SharesContextDeviceAndProgramsWithAQueueOfItsOwn) {
  const Context a = Context::create();
  const Context b = a.with_new_queue();
  EXPECT_NE(a.queue()(), b.queue()());
  EXPECT_EQ(a.opencl_context()(), b.opencl_context()());
  EXPECT_EQ(a.device()(), b.device()());
  EXPECT_EQ(&a.programs(), &b.programs());
  EXPECT_EQ(b.queue().getInfo<CL_QUEUE_CONTEXT>()(), a.opencl_context()());
  const cl_command_queue_properties props = b.queue().getInfo<CL_QUEUE_PROPERTIES>();
  EXPECT_TRUE(props & CL_QUEUE_PROFILING_ENABLE);
  EXPECT_FALSE(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
  expect_runs_a_kernel(b);
}

TEST(ContextNewQueue, OfAWrappedContextKeepsItsProfilingChoice) {
  RawQueue raw;  // no profiling
  const Context wrapped = Context::wrap(raw.context, raw.queue);
  const Context other = wrapped.with_new_queue();
  EXPECT_FALSE(other.profiling_enabled());
  EXPECT_EQ(other.opencl_context()(), raw.context);
  EXPECT_NE(other.queue()(), raw.queue);
  expect_runs_a_kernel(other);
}

TEST(ContextWrap, RetainsWhatItUsesAndReleasesOnlyThat) {
  RawQueue raw(CL_QUEUE_PROFILING_ENABLE);
  ASSERT_NE(raw.queue, nullptr);
  const cl_uint context_refs = reference_count(raw.context);
  const cl_uint queue_refs = reference_count(raw.queue);
  {
    test::ScopedEnv no_disk_cache("FP4CL_CACHE_DIR", "off");
    const Context wrapped = Context::wrap(raw.context, raw.queue);
    EXPECT_GT(reference_count(raw.context), context_refs);
    EXPECT_EQ(reference_count(raw.queue), queue_refs + 1);
    EXPECT_EQ(wrapped.opencl_context()(), raw.context);
    EXPECT_EQ(wrapped.queue()(), raw.queue);
    EXPECT_EQ(wrapped.device()(), default_device());
    const Context copy = wrapped;  // NOLINT: copies share the references
    EXPECT_EQ(reference_count(raw.queue), queue_refs + 1);
    // Programs and kernels built through the wrapped context hold references to it; they are
    // gone by the end of the scope too. (Nothing is enqueued here: a driver may release its own
    // references to a queue's finished commands asynchronously, which would make the count
    // below race. KeepsTheObjectsAliveAfterTheCallerReleasesThem runs a kernel.)
    ProgramCache programs(copy.opencl_context(), copy.device(), copy.info(), "",
                          test::memory_sources({{"iota.cl", kIotaSource}}));
    const cl::Kernel kernel = programs.kernel("iota.cl", "iota_plus");
    EXPECT_EQ(kernel.getInfo<CL_KERNEL_CONTEXT>()(), raw.context);
  }
  EXPECT_EQ(reference_count(raw.context), context_refs);
  EXPECT_EQ(reference_count(raw.queue), queue_refs);
}

TEST(ContextWrap, KeepsTheObjectsAliveAfterTheCallerReleasesThem) {
  RawQueue raw;
  ASSERT_NE(raw.queue, nullptr);
  test::ScopedEnv no_disk_cache("FP4CL_CACHE_DIR", "off");
  const Context wrapped = Context::wrap(raw.context, raw.queue);
  const cl_uint queue_refs = reference_count(raw.queue);
  cl_command_queue queue = raw.queue;
  raw.release();  // the caller is done with its references
  EXPECT_EQ(reference_count(queue), queue_refs - 1);
  expect_runs_a_kernel(wrapped);
}

TEST(ContextWrap, ReportsTheQueuesDeviceAndProfiling) {
  RawQueue plain;
  RawQueue profiled(CL_QUEUE_PROFILING_ENABLE);
  ASSERT_NE(plain.queue, nullptr);
  ASSERT_NE(profiled.queue, nullptr);
  test::ScopedEnv no_disk_cache("FP4CL_CACHE_DIR", "off");
  const Context a = Context::wrap(plain.context, plain.queue);
  const Context b = Context::wrap(profiled.context, profiled.queue);
  EXPECT_FALSE(a.profiling_enabled());
  EXPECT_TRUE(b.profiling_enabled());
  EXPECT_EQ(a.info().name, select_device(device_selector_from_env()).info.name);
  EXPECT_EQ(a.info().platform_index, -1);  // a device the caller brought
  EXPECT_EQ(a.programs().disk_dir(), "");
}

TEST(ContextWrap, NullHandlesAreClearErrors) {
  RawQueue raw;
  ASSERT_NE(raw.queue, nullptr);
  const cl_uint context_refs = reference_count(raw.context);
  const cl_uint queue_refs = reference_count(raw.queue);
  std::string message = error_of_wrap(nullptr, raw.queue);
  EXPECT_NE(message.find("Context::wrap: the cl_context is null"), std::string::npos) << message;
  message = error_of_wrap(raw.context, nullptr);
  EXPECT_NE(message.find("Context::wrap: the cl_command_queue is null"), std::string::npos) << message;
  EXPECT_EQ(reference_count(raw.context), context_refs);
  EXPECT_EQ(reference_count(raw.queue), queue_refs);
}

TEST(ContextWrap, AQueueOfAnotherContextIsAClearErrorAndTakesNoReference) {
  RawQueue a, b;
  ASSERT_NE(a.queue, nullptr);
  ASSERT_NE(b.queue, nullptr);
  const cl_uint a_refs = reference_count(a.context), b_refs = reference_count(b.context);
  const cl_uint queue_refs = reference_count(b.queue);
  const std::string message = error_of_wrap(a.context, b.queue);
  EXPECT_NE(message.find("the cl_command_queue belongs to another cl_context"), std::string::npos) << message;
  EXPECT_EQ(reference_count(a.context), a_refs);
  EXPECT_EQ(reference_count(b.context), b_refs);
  EXPECT_EQ(reference_count(b.queue), queue_refs);
}

TEST(ContextWrap, AnOutOfOrderQueueIsRefused) {
  RawQueue raw(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
  if (!raw.queue) GTEST_SKIP() << "the device does not offer out-of-order queues";
  const cl_uint queue_refs = reference_count(raw.queue);
  const std::string message = error_of_wrap(raw.context, raw.queue);
  EXPECT_NE(message.find("out-of-order"), std::string::npos) << message;
  EXPECT_EQ(reference_count(raw.queue), queue_refs);
}

}  // namespace
}  // namespace fp4cl
