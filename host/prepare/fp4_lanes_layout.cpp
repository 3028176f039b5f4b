#include "prepare/fp4_lanes_layout.hpp"

#include "fp4cl/formats.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "cl/opencl_calls.hpp"
#include "support/check.hpp"

namespace fp4cl {

Fp4LanesLayout make_fp4_lanes_layout(const Fp4Weight& w, Fp4LanesOrder order) {
  const std::int64_t block = block_size(w.format);
  if (w.k % kFp4LaneChunk != 0) fail("lanes layout: k = {} is not a multiple of {}", w.k, kFp4LaneChunk);
  Fp4LanesLayout layout;
  Fp4LanesLayoutInfo& info = layout.info;
  info.format = w.format;
  info.n = w.n;
  info.k = w.k;
  info.groups = (w.n + kFp4LaneRows - 1) / kFp4LaneRows;
  const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);
  info.scale_shift = offsets.scale_shift;
  info.exp_bias = offsets.exp_bias;

  const std::int64_t chunks = w.k / kFp4LaneChunk, blocks = w.k / block;
  layout.codes.assign(static_cast<std::size_t>(info.groups * chunks * 64), 0);
  layout.scales.assign(static_cast<std::size_t>(info.groups * blocks * kFp4LaneRows), 0);
  for (std::int64_t row = 0; row < w.n; ++row) {
    const std::int64_t g = row / kFp4LaneRows, r = row % kFp4LaneRows;
    const std::uint8_t* src = w.packed.data() + row * (w.k / 2);
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::uint8_t scale = w.scales[static_cast<std::size_t>(row * blocks + b)];
      // NVFP4: a negative scale's sign moves into its block's codes (e2m1 × -s = -e2m1 × s).
      std::uint8_t flip = 0;
      if (w.format == WeightFormat::nvfp4 && (scale & 0x80) != 0) {
        scale &= 0x7F;
        flip = 0x88;
      }
      layout.scales[static_cast<std::size_t>((g * blocks + b) * kFp4LaneRows + r)] = scale;
      for (std::int64_t e = b * block; e < (b + 1) * block; e += 4) {  // 4 elements: one byte pair per row
        const std::uint8_t b01 = static_cast<std::uint8_t>(src[e / 2] ^ flip);      // elements e, e + 1
        const std::uint8_t b23 = static_cast<std::uint8_t>(src[e / 2 + 1] ^ flip);  // elements e + 2, e + 3
        const std::int64_t c = e / kFp4LaneChunk, q = (e % kFp4LaneChunk) / 4;
        std::uint8_t* load = layout.codes.data() + (g * chunks + c) * 64 + q * 16;
        if (order == Fp4LanesOrder::by_element) {
          load[r] = b01;
          load[8 + r] = b23;
        } else {
          load[2 * r] = static_cast<std::uint8_t>((b01 & 0x0F) | (b23 << 4));     // elements e, e + 2
          load[2 * r + 1] = static_cast<std::uint8_t>((b01 >> 4) | (b23 & 0xF0));  // elements e + 1, e + 3
        }
      }
    }
  }
  return layout;
}

DeviceFp4LanesLayout upload_fp4_lanes_layout(const Context& ctx, const Fp4LanesLayout& layout) {
  DeviceFp4LanesLayout d;
  d.info = layout.info;
  const std::string weight = fmt::format("FP4 weight [{}, {}]", layout.info.n, layout.info.k);
  d.codes = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, layout.codes.size(), layout.codes.data(),
                            weight + " codes");
  d.scales = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, layout.scales.size(), layout.scales.data(),
                             weight + " block scales");
  d.bytes = layout.codes.size() + layout.scales.size();
  return d;
}

}  // namespace fp4cl
