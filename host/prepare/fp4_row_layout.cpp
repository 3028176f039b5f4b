#include "prepare/fp4_row_layout.hpp"

#include <algorithm>

#include "common/quant_recipe.cl"
#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

// The smallest and largest E8M0 exponent over the blocks that hold a nonzero code (codes 0 and
// 0x8 are zeros); {-1, -1} when every block is zero.
std::pair<int, int> mx_exponent_range(const Fp4Weight& w) {
  const std::int64_t blocks = w.k / 32;
  int lo = -1, hi = -1;
  for (std::int64_t r = 0; r < w.n; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint8_t* bytes = w.packed.data() + r * (w.k / 2) + b * 16;
      bool nonzero = false;
      for (int i = 0; i < 16 && !nonzero; ++i) nonzero = (bytes[i] & 0x77) != 0;
      if (!nonzero) continue;
      const int e = w.scales[static_cast<std::size_t>(r * blocks + b)];
      lo = lo < 0 ? e : std::min(lo, e);
      hi = std::max(hi, e);
    }
  }
  return {lo, hi};
}

// The kernels' code for an E2M1 code: magnitudes 0 and 1 swapped, sign kept (fp4_dot.cl decodes
// stored magnitudes 0, 2..7 with an exponent bias and masks stored magnitude 1 to zero, so that no
// fp32 subnormal appears).
std::uint8_t kernel_code(unsigned code) {
  const unsigned m = code & 7u;
  return static_cast<std::uint8_t>((code & 8u) | (m == 0 ? 1u : m == 1 ? 0u : m));
}

}  // namespace

Fp4ScaleOffsets fp4_scale_offsets(const Fp4Weight& w) {
  Fp4ScaleOffsets o;
  if (w.format != WeightFormat::mxfp4) return o;
  const auto [lo, hi] = mx_exponent_range(w);
  if (hi < 0) return o;  // an all-zero weight: any factor will do
  if (hi - lo > 125)
    fail("MXFP4 weight [{}, {}]: its nonzero blocks have scales from 2^{} to 2^{}, more than 2^125 apart; "
         "fp4cl's fp32 kernels cannot represent both ends",
         w.n, w.k, lo - 127, hi - 127);
  o.scale_shift = hi - 127;
  o.exp_bias = 127 - hi;
  return o;
}

Fp4RowLayout make_fp4_row_layout(const Fp4Weight& w) {
  const std::int64_t block = block_size(w.format);
  Fp4RowLayout layout;
  Fp4RowLayoutInfo& info = layout.info;
  info.format = w.format;
  info.n = w.n;
  info.k = w.k;
  info.kpad = round_up(w.k, kFp4RowStep);
  info.scale_kp = static_cast<std::uint32_t>(round_up(w.k / block, 4));
  const Fp4ScaleOffsets offsets = fp4_scale_offsets(w);
  info.scale_shift = offsets.scale_shift;
  info.exp_bias = offsets.exp_bias;

  std::uint8_t byte_map[256];
  for (unsigned b = 0; b < 256; ++b) byte_map[b] = static_cast<std::uint8_t>(kernel_code(b & 15u) | (kernel_code(b >> 4) << 4));
  const std::int64_t row_bytes = w.k / 2, pad_row_bytes = info.kpad / 2;
  layout.codes.assign(static_cast<std::size_t>(w.n * pad_row_bytes), byte_map[0]);  // zeros in the pad
  for (std::int64_t r = 0; r < w.n; ++r) {
    const std::uint8_t* src = w.packed.data() + r * row_bytes;
    std::uint8_t* dst = layout.codes.data() + r * pad_row_bytes;
    for (std::int64_t i = 0; i < row_bytes; ++i) dst[i] = byte_map[src[i]];
  }
  // NVFP4: a negative block scale's sign moves into its block's codes (e2m1 × -s = -e2m1 × s, and
  // E2M1 negates by its sign bit), so the kernels decode scales as magnitudes.
  std::vector<std::uint8_t> scales = w.scales;
  if (w.format == WeightFormat::nvfp4) {
    const std::int64_t blocks = w.k / block;
    for (std::int64_t r = 0; r < w.n; ++r) {
      for (std::int64_t b = 0; b < blocks; ++b) {
        std::uint8_t& sb = scales[static_cast<std::size_t>(r * blocks + b)];
        if ((sb & 0x80) == 0) continue;
        sb &= 0x7F;
        std::uint8_t* codes = layout.codes.data() + r * pad_row_bytes + b * (block / 2);
        for (std::int64_t i = 0; i < block / 2; ++i) codes[i] ^= 0x88;
      }
    }
  }
  layout.scales = swizzle_scales(scales, w.n, w.k / block);
  return layout;
}

}  // namespace fp4cl
