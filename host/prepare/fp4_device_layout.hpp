// A prepared FP4 weight layout on the device: the host layout's info, and its codes and block
// scales uploaded as read-only buffers. The rows, lanes and words layouts (fp4_row_layout.hpp,
// fp4_lane_groups.hpp) are uploaded this way.
#pragma once

#include <cstdint>
#include <string>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

template <typename Info>
struct DeviceFp4Layout {
  Info info;
  cl::Buffer codes, scales;
  std::uint64_t bytes = 0;  // codes + scales
};

// A read-only buffer holding `bytes` bytes of weight [n, k]'s `what` ("codes", "block scales"),
// named so in errors ("FP4 weight [n, k] codes").
cl::Buffer upload_fp4_weight_bytes(const Context& ctx, std::int64_t n, std::int64_t k, const void* data,
                                   std::size_t bytes, const std::string& what);

// Uploads a host layout: one with `info` (holding n and k) and the vectors `codes` and `scales`.
template <typename Layout>
DeviceFp4Layout<decltype(Layout::info)> upload_fp4_layout(const Context& ctx, const Layout& layout) {
  DeviceFp4Layout<decltype(Layout::info)> d;
  d.info = layout.info;
  const std::size_t code_bytes = layout.codes.size() * sizeof(layout.codes[0]);
  d.codes = upload_fp4_weight_bytes(ctx, layout.info.n, layout.info.k, layout.codes.data(), code_bytes, "codes");
  d.scales = upload_fp4_weight_bytes(ctx, layout.info.n, layout.info.k, layout.scales.data(), layout.scales.size(),
                                     "block scales");
  d.bytes = code_bytes + layout.scales.size();
  return d;
}

}  // namespace fp4cl
