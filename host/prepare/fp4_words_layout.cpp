#include "prepare/fp4_words_layout.hpp"

#include "cl/opencl_calls.hpp"
#include "fp4cl/formats.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "support/check.hpp"

namespace fp4cl {

Fp4WordsLayout make_fp4_words_layout(const Fp4Weight& w) {
  const std::int64_t block = block_size(w.format);
  if (w.k % kFp4WordChunk != 0 || w.k % block != 0)
    fail("words layout: k = {} is not a multiple of {}", w.k, std::max(kFp4WordChunk, block));
  Fp4WordsLayout layout;
  Fp4WordsLayoutInfo& info = layout.info;
  info.format = w.format;
  info.n = w.n;
  info.k = w.k;
  info.groups = (w.n + kFp4WordRows - 1) / kFp4WordRows;
  const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);
  info.scale_shift = offsets.scale_shift;
  info.exp_bias = offsets.exp_bias;

  const std::int64_t words = w.k / 8, blocks = w.k / block;
  layout.codes.assign(static_cast<std::size_t>(info.groups * words * kFp4WordRows), 0);
  layout.scales.assign(static_cast<std::size_t>(info.groups * blocks * kFp4WordRows), 0);
  for (std::int64_t row = 0; row < w.n; ++row) {
    const std::int64_t g = row / kFp4WordRows, r = row % kFp4WordRows;
    const std::uint8_t* src = w.packed.data() + row * (w.k / 2);
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::uint8_t scale = w.scales[static_cast<std::size_t>(row * blocks + b)];
      // NVFP4: a negative scale's sign moves into its block's codes (e2m1 × -s = -e2m1 × s).
      std::uint32_t flip = 0;
      if (w.format == WeightFormat::nvfp4 && (scale & 0x80) != 0) {
        scale &= 0x7F;
        flip = 0x88888888u;
      }
      layout.scales[static_cast<std::size_t>((g * blocks + b) * kFp4WordRows + r)] = scale;
      for (std::int64_t wi = b * block / 8; wi < (b + 1) * block / 8; ++wi) {
        const std::uint8_t* p = src + 4 * wi;
        const std::uint32_t word = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                   static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
        layout.codes[static_cast<std::size_t>((g * words + wi) * kFp4WordRows + r)] = word ^ flip;
      }
    }
  }
  return layout;
}

DeviceFp4WordsLayout upload_fp4_words_layout(const Context& ctx, const Fp4WordsLayout& layout) {
  DeviceFp4WordsLayout d;
  d.info = layout.info;
  const std::string weight = fmt::format("FP4 weight [{}, {}]", layout.info.n, layout.info.k);
  const std::size_t code_bytes = layout.codes.size() * sizeof(std::uint32_t);
  d.codes = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, code_bytes,
                            layout.codes.data(), weight + " codes");
  d.scales = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, layout.scales.size(),
                             layout.scales.data(), weight + " block scales");
  d.bytes = code_bytes + layout.scales.size();
  return d;
}

}  // namespace fp4cl
