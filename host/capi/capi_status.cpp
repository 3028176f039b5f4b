// C API: version, status names and the thread-local last error.
#include "fp4cl/opencl.hpp"

#include <string>

#include "capi/capi_internal.hpp"

#ifndef FP4CL_VERSION_STRING
#error "the build defines FP4CL_VERSION_STRING (the project version)"
#endif

namespace fp4cl::capi {

namespace {
struct LastError {
  std::string message;
  int cl_status = 0;
};
LastError& last_error() {
  thread_local LastError e;
  return e;
}
}  // namespace

void clear_last_error() {
  LastError& e = last_error();
  e.message.clear();
  e.cl_status = 0;
}

void set_last_error(fp4cl_status status, const std::string& message, int cl_status) {
  LastError& e = last_error();
  e.cl_status = cl_status;
  try {
    e.message = message;
  } catch (...) {
    e.message.clear();  // out of memory for the message itself: the status still says what failed
  }
  (void)status;
}

fp4cl_status status_of_error(int cl_status, fp4cl_status otherwise) {
  switch (cl_status) {
    case CL_SUCCESS:
      return otherwise;
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return FP4CL_ERROR_OUT_OF_MEMORY;
    default:
      return FP4CL_ERROR_OPENCL;
  }
}

}  // namespace fp4cl::capi

extern "C" {

uint32_t fp4cl_version(void) {
  static_assert(FP4CL_VERSION == FP4CL_VERSION_MAJOR * 10000 + FP4CL_VERSION_MINOR * 100 + FP4CL_VERSION_PATCH);
  return FP4CL_VERSION;
}

const char* fp4cl_version_string(void) { return FP4CL_VERSION_STRING; }

const char* fp4cl_last_error(void) { return fp4cl::capi::last_error().message.c_str(); }

int32_t fp4cl_last_cl_status(void) { return fp4cl::capi::last_error().cl_status; }

const char* fp4cl_status_name(fp4cl_status status) {
  switch (status) {
    case FP4CL_SUCCESS: return "FP4CL_SUCCESS";
    case FP4CL_ERROR_INVALID_ARGUMENT: return "FP4CL_ERROR_INVALID_ARGUMENT";
    case FP4CL_ERROR_NOT_FOUND: return "FP4CL_ERROR_NOT_FOUND";
    case FP4CL_ERROR_INVALID_MODEL: return "FP4CL_ERROR_INVALID_MODEL";
    case FP4CL_ERROR_DEVICE_NOT_FOUND: return "FP4CL_ERROR_DEVICE_NOT_FOUND";
    case FP4CL_ERROR_OPENCL: return "FP4CL_ERROR_OPENCL";
    case FP4CL_ERROR_OUT_OF_MEMORY: return "FP4CL_ERROR_OUT_OF_MEMORY";
    case FP4CL_ERROR_INVALID_EXPERT_ID: return "FP4CL_ERROR_INVALID_EXPERT_ID";
    case FP4CL_ERROR_UNSUPPORTED: return "FP4CL_ERROR_UNSUPPORTED";
    case FP4CL_ERROR_INTERNAL: return "FP4CL_ERROR_INTERNAL";
  }
  return "FP4CL_UNKNOWN_STATUS";
}

}  // extern "C"
