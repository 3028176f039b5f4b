// The checks every call makes on the buffers its caller hands it (Linear, MoeLayer, Quantizer;
// the C API makes its own on cl_mem handles, capi_buffers.cpp): a null buffer, or one made in
// another OpenCL context than the call's, is an error naming the call and the buffer. A buffer of
// another context would otherwise fail only at the kernel launch, as a kernel argument's
// CL_INVALID_MEM_OBJECT (NVIDIA), or be used as it is (PoCL).
#pragma once

#include <cstdint>
#include <string_view>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

// The buffer's size in bytes, once it passed those checks. Throws fp4cl::Error starting with
// `call` (e.g. "MoE") and naming the buffer `what` (e.g. "topk_ids").
std::int64_t caller_buffer_bytes(const Context& ctx, const cl::Buffer& buffer, std::string_view call,
                                 std::string_view what);

}  // namespace fp4cl
