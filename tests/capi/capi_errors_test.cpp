// C API: version, status names, the thread-local last error, and NULL handles and pointers in
// every entry point (an error naming the argument, never a crash).
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "capi/capi_support.hpp"

namespace fp4cl::test {
namespace {

TEST(CapiVersion, RuntimeVersionMatchesTheHeaderAndTheProject) {
  EXPECT_EQ(fp4cl_version(), static_cast<uint32_t>(FP4CL_VERSION));
  const std::string expected = std::to_string(FP4CL_VERSION_MAJOR) + "." + std::to_string(FP4CL_VERSION_MINOR) + "." +
                               std::to_string(FP4CL_VERSION_PATCH);
  EXPECT_EQ(std::string(fp4cl_version_string()), expected);
}

TEST(CapiStatus, EveryStatusHasItsName) {
  EXPECT_STREQ(fp4cl_status_name(FP4CL_SUCCESS), "FP4CL_SUCCESS");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_INVALID_ARGUMENT), "FP4CL_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_NOT_FOUND), "FP4CL_ERROR_NOT_FOUND");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_INVALID_MODEL), "FP4CL_ERROR_INVALID_MODEL");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_DEVICE_NOT_FOUND), "FP4CL_ERROR_DEVICE_NOT_FOUND");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_OPENCL), "FP4CL_ERROR_OPENCL");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_OUT_OF_MEMORY), "FP4CL_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_INVALID_EXPERT_ID), "FP4CL_ERROR_INVALID_EXPERT_ID");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_UNSUPPORTED), "FP4CL_ERROR_UNSUPPORTED");
  EXPECT_STREQ(fp4cl_status_name(FP4CL_ERROR_INTERNAL), "FP4CL_ERROR_INTERNAL");
  EXPECT_STREQ(fp4cl_status_name(static_cast<fp4cl_status>(12)), "FP4CL_UNKNOWN_STATUS");
}

TEST(CapiLastError, IsSetOnFailureClearedOnSuccessAndPerThread) {
  size_t count = 0;
  expect_error(fp4cl_model_layer_count(nullptr, &count), FP4CL_ERROR_INVALID_ARGUMENT,
               {"fp4cl_model_layer_count", "model is NULL"});
  EXPECT_EQ(fp4cl_last_cl_status(), 0);
  std::string other_thread = "unset";
  std::thread([&] { other_thread = fp4cl_last_error(); }).join();
  EXPECT_EQ(other_thread, "");  // another thread has its own message
  EXPECT_NE(std::string(fp4cl_last_error()), "");
  ModelPtr model = open_model();
  EXPECT_EQ(fp4cl_model_layer_count(model.get(), &count), FP4CL_SUCCESS);
  EXPECT_STREQ(fp4cl_last_error(), "");
}

TEST(CapiNullArguments, EveryEntryPointRefusesNullHandlesAndOutputs) {
  const fp4cl_status bad = FP4CL_ERROR_INVALID_ARGUMENT;
  fp4cl_context* ctx = nullptr;
  fp4cl_model* model = nullptr;
  fp4cl_linear* linear = nullptr;
  fp4cl_moe* moe = nullptr;
  size_t n = 0;
  fp4cl_layer_info layer_info;
  fp4cl_linear_info linear_info;
  fp4cl_moe_info moe_info;
  uint16_t x[64] = {};
  expect_error(fp4cl_context_create("default", nullptr), bad, {"out is NULL"});
  expect_error(fp4cl_context_wrap(nullptr, nullptr, &ctx), bad, {"context (cl_context) is NULL"});
  expect_error(fp4cl_context_get_cl(nullptr, nullptr, nullptr, nullptr), bad, {"ctx is NULL"});
  expect_error(fp4cl_context_finish(nullptr), bad, {"ctx is NULL"});
  EXPECT_STREQ(fp4cl_context_device_description(nullptr), "");
  expect_error(fp4cl_model_open(nullptr, "/tmp", &model), bad, {"ctx is NULL"});
  expect_error(fp4cl_model_open(c_context(), nullptr, &model), bad, {"directory is NULL"});
  expect_error(fp4cl_model_open(c_context(), "/tmp", nullptr), bad, {"out is NULL"});
  expect_error(fp4cl_model_layer_info(nullptr, 0, &layer_info), bad, {"model is NULL"});
  expect_error(fp4cl_model_find_layer(nullptr, "x", &n), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_linear(nullptr, "x", nullptr, &linear), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_linear_at(nullptr, 0, nullptr, &linear), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe(nullptr, "x", nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe_at(nullptr, 0, nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_mlp(nullptr, "x", nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe_with_activation(nullptr, "x", nullptr, nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe_at_with_activation(nullptr, 0, nullptr, nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe_with_shared_experts(nullptr, "x", nullptr, nullptr, &moe), bad, {"model is NULL"});
  expect_error(fp4cl_model_get_moe_at_with_shared_experts(nullptr, 0, nullptr, nullptr, &moe), bad, {"model is NULL"});
  std::int32_t shared_experts = 0;
  expect_error(fp4cl_moe_get_shared_experts(nullptr, &shared_experts), bad, {"layer is NULL"});
  expect_error(fp4cl_linear_get_info(nullptr, &linear_info), bad, {"layer is NULL"});
  expect_error(fp4cl_linear_run(nullptr, x, sizeof x, 1, x, sizeof x), bad, {"layer is NULL"});
  expect_error(fp4cl_linear_enqueue(nullptr, nullptr, nullptr, 1, 0, nullptr, nullptr), bad, {"layer is NULL"});
  expect_error(fp4cl_moe_get_info(nullptr, &moe_info), bad, {"layer is NULL"});
  fp4cl_moe_activation moe_activation;
  expect_error(fp4cl_moe_get_activation(nullptr, &moe_activation), bad, {"layer is NULL"});
  fp4cl_moe_routing moe_routing;
  expect_error(fp4cl_moe_get_routing(nullptr, &moe_routing), bad, {"layer is NULL"});
  expect_error(fp4cl_moe_run(nullptr, x, sizeof x, nullptr, 0, nullptr, 0, 1, x, sizeof x), bad, {"layer is NULL"});
  expect_error(fp4cl_moe_run_logits(nullptr, x, sizeof x, nullptr, 0, 1, x, sizeof x), bad, {"layer is NULL"});
  expect_error(fp4cl_moe_enqueue(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, nullptr, nullptr), bad,
               {"layer is NULL"});
  expect_error(fp4cl_moe_enqueue_logits(nullptr, nullptr, nullptr, nullptr, 1, 0, nullptr, nullptr), bad,
               {"layer is NULL"});
  expect_error(fp4cl_moe_finish(nullptr), bad, {"layer is NULL"});
  EXPECT_EQ(ctx, nullptr);  // outputs untouched on failure
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(linear, nullptr);
  EXPECT_EQ(moe, nullptr);

  // With a model: NULL outputs and names.
  ModelPtr m = open_model();
  expect_error(fp4cl_model_layer_count(m.get(), nullptr), bad, {"count is NULL"});
  expect_error(fp4cl_model_layer_info(m.get(), 0, nullptr), bad, {"info is NULL"});
  expect_error(fp4cl_model_find_layer(m.get(), nullptr, &n), bad, {"name is NULL"});
  expect_error(fp4cl_model_find_layer(m.get(), "x", nullptr), bad, {"index is NULL"});
  expect_error(fp4cl_model_get_linear(m.get(), nullptr, nullptr, &linear), bad, {"name is NULL"});
  expect_error(fp4cl_model_get_linear(m.get(), "model.layers.0.self_attn.q_proj", nullptr, nullptr), bad,
               {"out is NULL"});
  expect_error(fp4cl_model_get_moe(m.get(), nullptr, nullptr, &moe), bad, {"name is NULL"});
  expect_error(fp4cl_model_get_moe(m.get(), "model.layers.0", nullptr, nullptr), bad, {"out is NULL"});
  expect_error(fp4cl_model_get_mlp(m.get(), nullptr, nullptr, &moe), bad, {"prefix is NULL"});
  LinearPtr l = get_linear(m.get(), "model.layers.0.self_attn.q_proj");
  expect_error(fp4cl_linear_get_info(l.get(), nullptr), bad, {"info is NULL"});
  MoePtr e = get_moe(m.get(), "model.layers.0");
  expect_error(fp4cl_moe_get_info(e.get(), nullptr), bad, {"info is NULL"});
  expect_error(fp4cl_moe_get_activation(e.get(), nullptr), bad, {"activation is NULL"});
  expect_error(fp4cl_moe_get_routing(e.get(), nullptr), bad, {"routing is NULL"});
  expect_error(fp4cl_moe_get_shared_experts(e.get(), nullptr), bad, {"count is NULL"});
}

TEST(CapiRelease, NullIsANoOp) {
  fp4cl_context_release(nullptr);
  fp4cl_model_release(nullptr);
  fp4cl_linear_release(nullptr);
  fp4cl_moe_release(nullptr);
  fp4cl_linear_options_init(nullptr);
  fp4cl_moe_options_init(nullptr);
}

}  // namespace
}  // namespace fp4cl::test
