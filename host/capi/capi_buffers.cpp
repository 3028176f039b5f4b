// C API: the caller's cl_mem buffers and cl_event lists, the staging buffers of host-pointer
// calls, and size checks.
#include <algorithm>
#include <limits>

#include "capi/capi_internal.hpp"
#include "cl/opencl_calls.hpp"

namespace fp4cl::capi {

cl::Buffer wrap_buffer(const fp4cl::Context& ctx, cl_mem mem, const char* what) {
  if (mem == nullptr) raise(FP4CL_ERROR_INVALID_ARGUMENT, "the {} buffer is NULL", what);
  cl_context owner = nullptr;
  const cl_int status = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof(owner), &owner, nullptr);
  if (status != CL_SUCCESS)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "the {} buffer is not a valid cl_mem: {} ({})", what, cl_status_name(status),
          status);
  if (owner != ctx.opencl_context()())
    raise(FP4CL_ERROR_INVALID_ARGUMENT,
          "the {} buffer belongs to another OpenCL context than the fp4cl context's (fp4cl_context_get_cl gives it)",
          what);
  return cl::Buffer(mem, true);
}

std::vector<cl::Event> wrap_wait_list(cl_uint num_wait, const cl_event* wait_list) {
  if (num_wait > 0 && wait_list == nullptr)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "num_wait = {} but wait_list is NULL", num_wait);
  if (num_wait == 0 && wait_list != nullptr)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "wait_list is not NULL but num_wait = 0 (pass NULL for no events)");
  std::vector<cl::Event> wait;
  wait.reserve(num_wait);
  for (cl_uint i = 0; i < num_wait; ++i) {
    if (wait_list[i] == nullptr) raise(FP4CL_ERROR_INVALID_ARGUMENT, "wait_list[{}] is NULL", i);
    wait.emplace_back(wait_list[i], true);
  }
  return wait;
}

void hand_out_event(const fp4cl::Context& ctx, const cl::Event& event, const std::vector<cl::Event>& wait,
                    cl_event* done) {
  if (done == nullptr) return;
  cl::Event out = event;
  if (out() == nullptr) {
    cl::Event marker;
    const cl_int status = fp4cl::opencl::enqueue_marker(ctx.queue(), wait.empty() ? nullptr : &wait, &marker);
    if (status != CL_SUCCESS)
      throw fp4cl::Error(fmt::format("enqueueing the marker of an empty call: {} ({})", cl_status_name(status), status),
                         status);
    out = marker;
  }
  const cl_int status = clRetainEvent(out());
  if (status != CL_SUCCESS)
    throw fp4cl::Error(fmt::format("retaining the done event: {} ({})", cl_status_name(status), status), status);
  *done = out();
}

const cl::Buffer& staging_for(const fp4cl::Context& ctx, fp4cl_staging_buffer& staging, std::size_t bytes,
                              const char* what) {
  if (bytes == 0) bytes = 1;
  if (staging.bytes < bytes) {
    staging.buffer = cl::Buffer();
    staging.bytes = 0;
    cl::Buffer b;
    const cl_int status = fp4cl::opencl::create_buffer(ctx.opencl_context(), CL_MEM_READ_WRITE, bytes, nullptr, b);
    if (status != CL_SUCCESS)
      throw fp4cl::Error(fmt::format("allocating a {} byte device buffer for {}: {} ({})", bytes, what,
                                     cl_status_name(status), status),
                         status);
    staging.buffer = std::move(b);
    staging.bytes = bytes;
  }
  return staging.buffer;
}

std::size_t checked_bytes(std::int64_t count, std::size_t element_bytes, const char* what) {
  if (count < 0) raise(FP4CL_ERROR_INVALID_ARGUMENT, "{} has a negative size ({} elements)", what, count);
  if (static_cast<std::uint64_t>(count) > std::numeric_limits<std::size_t>::max() / element_bytes)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "{}: {} elements of {} bytes overflow size_t", what, count, element_bytes);
  return static_cast<std::size_t>(count) * element_bytes;
}

void require_bytes(const char* what, std::size_t have, std::size_t need, const std::string& shape) {
  if (have < need)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "{} has {} bytes; {} needs {}", what, have, shape, need);
}

void copy_text(const std::string& text, char* buffer, std::size_t size, std::size_t* length) {
  if (size > 0 && buffer == nullptr) raise(FP4CL_ERROR_INVALID_ARGUMENT, "buffer is NULL with size {}", size);
  if (size > 0) {
    const std::size_t n = std::min(text.size(), size - 1);
    std::copy_n(text.data(), n, buffer);
    buffer[n] = '\0';
  }
  if (length != nullptr) *length = text.size();
}

}  // namespace fp4cl::capi
