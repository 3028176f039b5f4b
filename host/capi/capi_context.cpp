// C API: contexts (fp4cl_context_*).
#include <memory>

#include "capi/capi_internal.hpp"

using fp4cl::capi::guarded;
using fp4cl::capi::require;

extern "C" {

fp4cl_status fp4cl_context_create(const char* selector, fp4cl_context** out) {
  return guarded("fp4cl_context_create", FP4CL_ERROR_DEVICE_NOT_FOUND, [&] {
    require(out, "out");
    fp4cl::Context ctx = selector ? fp4cl::Context::create(selector) : fp4cl::Context::create();
    auto handle = std::make_unique<fp4cl_context>(fp4cl_context{ctx, ctx.info().describe()});
    *out = handle.release();
  });
}

fp4cl_status fp4cl_context_wrap(cl_context context, cl_command_queue queue, fp4cl_context** out) {
  return guarded("fp4cl_context_wrap", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(out, "out");
    if (context == nullptr) fp4cl::capi::raise(FP4CL_ERROR_INVALID_ARGUMENT, "context (cl_context) is NULL");
    if (queue == nullptr) fp4cl::capi::raise(FP4CL_ERROR_INVALID_ARGUMENT, "queue (cl_command_queue) is NULL");
    fp4cl::Context ctx = fp4cl::Context::wrap(context, queue);
    auto handle = std::make_unique<fp4cl_context>(fp4cl_context{ctx, ctx.info().describe()});
    *out = handle.release();
  });
}

void fp4cl_context_release(fp4cl_context* ctx) { delete ctx; }

fp4cl_status fp4cl_context_get_cl(const fp4cl_context* ctx, cl_context* context, cl_command_queue* queue,
                                  cl_device_id* device) {
  return guarded("fp4cl_context_get_cl", FP4CL_ERROR_INTERNAL, [&] {
    require(ctx, "ctx");
    if (context) *context = ctx->ctx.opencl_context()();
    if (queue) *queue = ctx->ctx.queue()();
    if (device) *device = ctx->ctx.device()();
  });
}

const char* fp4cl_context_device_description(const fp4cl_context* ctx) {
  return ctx ? ctx->description.c_str() : "";
}

fp4cl_status fp4cl_context_finish(fp4cl_context* ctx) {
  return guarded("fp4cl_context_finish", FP4CL_ERROR_OPENCL, [&] {
    require(ctx, "ctx");
    const cl_int status = ctx->ctx.queue().finish();
    if (status != CL_SUCCESS)
      throw fp4cl::Error(fmt::format("clFinish: {} ({})", fp4cl::cl_status_name(status), status), status);
  });
}

}  // extern "C"
