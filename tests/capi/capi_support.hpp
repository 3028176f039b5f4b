// Helpers of the C API tests: handles that release themselves, the checkpoint the tests load, and
// an expectation on a status with its message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/fp4cl.h"

namespace fp4cl::test {

struct ContextDeleter {
  void operator()(fp4cl_context* p) const { fp4cl_context_release(p); }
};
struct ModelDeleter {
  void operator()(fp4cl_model* p) const { fp4cl_model_release(p); }
};
struct LinearDeleter {
  void operator()(fp4cl_linear* p) const { fp4cl_linear_release(p); }
};
struct MoeDeleter {
  void operator()(fp4cl_moe* p) const { fp4cl_moe_release(p); }
};
using ContextPtr = std::unique_ptr<fp4cl_context, ContextDeleter>;
using ModelPtr = std::unique_ptr<fp4cl_model, ModelDeleter>;
using LinearPtr = std::unique_ptr<fp4cl_linear, LinearDeleter>;
using MoePtr = std::unique_ptr<fp4cl_moe, MoeDeleter>;

// The default variant the tests load: compressed-tensors NVFP4 W4A4 (H = 64, I = 32, E = 4, k = 2).
Variant default_variant();

// One C context per test binary, on the device FP4CL_DEVICE selects (as shared_context()).
fp4cl_context* c_context();
// `variant`'s checkpoint opened through the C API (asserting success).
ModelPtr open_model(const Variant& variant = default_variant());
LinearPtr get_linear(fp4cl_model* model, const char* name, const fp4cl_linear_options* options = nullptr);
MoePtr get_moe(fp4cl_model* model, const char* name, const fp4cl_moe_options* options = nullptr);

// Expects `status` to be `expected` with a last-error message containing each of `fragments`.
void expect_error(fp4cl_status status, fp4cl_status expected, const std::vector<std::string>& fragments);

// An OpenCL context and in-order queue of the test's own on fp4cl's device (released at exit).
struct CallerQueue {
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_device_id device = nullptr;
};
const CallerQueue& caller_queue();
cl_mem create_buffer(cl_context context, std::size_t bytes, const void* data = nullptr);

}  // namespace fp4cl::test
