#include "cl/caller_buffers.hpp"

#include "support/check.hpp"

namespace fp4cl {

std::int64_t caller_buffer_bytes(const Context& ctx, const cl::Buffer& buffer, std::string_view call,
                                 std::string_view what) {
  if (buffer() == nullptr) fail("{}: the {} buffer is null", call, what);
  cl_context owner = nullptr;
  check_cl(buffer.getInfo(CL_MEM_CONTEXT, &owner), "{}: querying the OpenCL context of the {} buffer", call, what);
  if (owner != ctx.opencl_context()())
    fail("{}: the {} buffer belongs to another OpenCL context than the one of its fp4cl Context (make buffers in "
         "Context::opencl_context())",
         call, what);
  std::size_t size = 0;
  check_cl(buffer.getInfo(CL_MEM_SIZE, &size), "{}: querying the size of the {} buffer", call, what);
  return static_cast<std::int64_t>(size);
}

}  // namespace fp4cl
