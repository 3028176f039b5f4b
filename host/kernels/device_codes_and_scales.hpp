// A weight layout of 32-bit code words and block-scale bytes (the split and MMA layouts:
// prepare/fp4_split_layout.hpp, prepare/fp4_mma_layout.hpp) on the device, read-only.
#pragma once

#include <cstdint>
#include <string>

#include "cl/opencl_calls.hpp"

namespace fp4cl {

struct DeviceCodesAndScales {
  cl::Buffer words, scales;
  std::uint64_t bytes = 0;  // both buffers
};

// Uploads layout.words and layout.scales; a failed allocation names "<what> codes (<name>)" or
// "<what> block scales (<name>)".
template <class Layout>
DeviceCodesAndScales upload_codes_and_scales(const Context& ctx, const Layout& layout, const std::string& what,
                                             const std::string& name) {
  DeviceCodesAndScales d;
  d.words = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, layout.words.size() * 4,
                            layout.words.data(), what + " codes (" + name + ")");
  d.scales = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, layout.scales.size(),
                             layout.scales.data(), what + " block scales (" + name + ")");
  d.bytes = layout.words.size() * 4 + layout.scales.size();
  return d;
}

}  // namespace fp4cl
