// C API contexts: from a device selector, from the caller's cl_context and queue (retained and
// released), their OpenCL objects, and handles that outlive the context handle they came from.
#include <gtest/gtest.h>

#include <string>

#include "capi/capi_support.hpp"

namespace fp4cl::test {
namespace {

cl_uint reference_count(cl_context c) {
  cl_uint n = 0;
  EXPECT_EQ(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, nullptr), CL_SUCCESS);
  return n;
}
cl_uint reference_count(cl_command_queue q) {
  cl_uint n = 0;
  EXPECT_EQ(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, nullptr), CL_SUCCESS);
  return n;
}

TEST(CapiContext, CreatesOnTheDefaultDeviceAndGivesItsOpenClObjects) {
  fp4cl_context* raw = nullptr;
  ASSERT_EQ(fp4cl_context_create("default", &raw), FP4CL_SUCCESS) << fp4cl_last_error();
  ContextPtr ctx(raw);
  EXPECT_FALSE(std::string(fp4cl_context_device_description(ctx.get())).empty());
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_device_id device = nullptr;
  ASSERT_EQ(fp4cl_context_get_cl(ctx.get(), &context, &queue, &device), FP4CL_SUCCESS);
  EXPECT_NE(context, nullptr);
  EXPECT_NE(device, nullptr);
  cl_context queue_context = nullptr;
  ASSERT_EQ(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof queue_context, &queue_context, nullptr), CL_SUCCESS);
  EXPECT_EQ(queue_context, context);
  EXPECT_EQ(fp4cl_context_finish(ctx.get()), FP4CL_SUCCESS);
}

TEST(CapiContext, PlatformDeviceIndicesSelectTheSameDevice) {
  fp4cl_context* raw = nullptr;
  ASSERT_EQ(fp4cl_context_create("0:0", &raw), FP4CL_SUCCESS) << fp4cl_last_error();
  ContextPtr ctx(raw);
  EXPECT_EQ(std::string(fp4cl_context_device_description(ctx.get())).rfind("0:0 ", 0), 0u)
      << fp4cl_context_device_description(ctx.get());
}

TEST(CapiContext, AnUnknownSelectorIsDeviceNotFoundNamingIt) {
  fp4cl_context* raw = nullptr;
  expect_error(fp4cl_context_create("no-such-device-xyz", &raw), FP4CL_ERROR_DEVICE_NOT_FOUND,
               {"fp4cl_context_create", "no-such-device-xyz"});
  expect_error(fp4cl_context_create("57:3", &raw), FP4CL_ERROR_DEVICE_NOT_FOUND, {"57"});
  EXPECT_EQ(raw, nullptr);
}

TEST(CapiContext, WrapsTheCallersContextAndQueueRetainingThemWhileUsed) {
  const CallerQueue& q = caller_queue();
  const cl_uint context_refs = reference_count(q.context);
  const cl_uint queue_refs = reference_count(q.queue);
  fp4cl_context* raw = nullptr;
  ASSERT_EQ(fp4cl_context_wrap(q.context, q.queue, &raw), FP4CL_SUCCESS) << fp4cl_last_error();
  ContextPtr ctx(raw);
  EXPECT_GT(reference_count(q.context), context_refs);
  EXPECT_GT(reference_count(q.queue), queue_refs);
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  ASSERT_EQ(fp4cl_context_get_cl(ctx.get(), &context, &queue, nullptr), FP4CL_SUCCESS);
  EXPECT_EQ(context, q.context);
  EXPECT_EQ(queue, q.queue);
  ctx.reset();
  EXPECT_EQ(reference_count(q.context), context_refs);
  EXPECT_EQ(reference_count(q.queue), queue_refs);
}

TEST(CapiContext, WrapRefusesAQueueOfAnotherContext) {
  cl_context other = nullptr;
  ASSERT_EQ(fp4cl_context_get_cl(c_context(), &other, nullptr, nullptr), FP4CL_SUCCESS);
  fp4cl_context* raw = nullptr;
  expect_error(fp4cl_context_wrap(other, caller_queue().queue, &raw), FP4CL_ERROR_INVALID_ARGUMENT,
               {"fp4cl_context_wrap"});
  expect_error(fp4cl_context_wrap(other, nullptr, &raw), FP4CL_ERROR_INVALID_ARGUMENT,
               {"queue (cl_command_queue) is NULL"});
  EXPECT_EQ(raw, nullptr);
}

TEST(CapiContext, ModelsAndLayersOutliveTheContextHandle) {
  fp4cl_context* raw = nullptr;
  ASSERT_EQ(fp4cl_context_create(nullptr, &raw), FP4CL_SUCCESS) << fp4cl_last_error();
  fp4cl_model* model = nullptr;
  const std::string dir = quantized_model(default_variant()).string();
  ASSERT_EQ(fp4cl_model_open(raw, dir.c_str(), &model), FP4CL_SUCCESS) << fp4cl_last_error();
  fp4cl_context_release(raw);
  LinearPtr layer = get_linear(model, "model.layers.0.self_attn.q_proj");
  fp4cl_model_release(model);
  std::vector<uint16_t> x(64, 0x3F80), y(64, 0);  // 1.0
  EXPECT_EQ(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, 1, y.data(), y.size() * 2), FP4CL_SUCCESS)
      << fp4cl_last_error();
}

}  // namespace
}  // namespace fp4cl::test
