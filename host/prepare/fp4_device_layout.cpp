#include "prepare/fp4_device_layout.hpp"

#include <fmt/format.h>

#include "cl/opencl_calls.hpp"

namespace fp4cl {

cl::Buffer upload_fp4_weight_bytes(const Context& ctx, std::int64_t n, std::int64_t k, const void* data,
                                   std::size_t bytes, const std::string& what) {
  return allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, data,
                         fmt::format("FP4 weight [{}, {}] {}", n, k, what));
}

}  // namespace fp4cl
