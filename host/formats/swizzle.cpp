// The 128×4 swizzled block-scale layout (FP4.md §7). The offset formula is the one the kernels
// use (swizzled_scale_offset in kernels/common/quant_recipe.cl).
#include <limits>

#include "common/quant_recipe.cl"
#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

void check_shape(const char* what, std::int64_t experts, std::int64_t rows, std::int64_t scale_cols) {
  if (experts < 0 || rows < 0 || scale_cols < 0)
    fail("{}: negative shape (experts {}, rows {}, scale_cols {})", what, experts, rows, scale_cols);
  // Offsets within one expert are 32-bit, as in the kernels.
  if (swizzled_padded_rows(rows) * swizzled_padded_cols(scale_cols) > std::numeric_limits<std::uint32_t>::max())
    fail("{}: {} × {} scales exceed the 32-bit offsets of the swizzled layout", what, rows, scale_cols);
}

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

}  // namespace

const char* to_string(ScaleLayout layout) { return layout == ScaleLayout::linear ? "linear" : "swizzled"; }

std::int64_t swizzled_padded_rows(std::int64_t rows) { return (rows + 127) / 128 * 128; }
std::int64_t swizzled_padded_cols(std::int64_t scale_cols) { return (scale_cols + 3) / 4 * 4; }

std::int64_t scale_bytes(ScaleLayout layout, std::int64_t rows, std::int64_t scale_cols) {
  return layout == ScaleLayout::linear ? rows * scale_cols
                                       : swizzled_padded_rows(rows) * swizzled_padded_cols(scale_cols);
}

std::int64_t swizzled_scale_index(std::int64_t row, std::int64_t col, std::int64_t padded_cols) {
  if (padded_cols <= 0 || padded_cols % 4 != 0)
    fail("swizzled_scale_index: padded_cols = {} is not a positive multiple of 4", padded_cols);
  if (row < 0 || col < 0 || col >= padded_cols)
    fail("swizzled_scale_index: (row {}, col {}) is outside a matrix with {} padded columns", row, col, padded_cols);
  check_shape("swizzled_scale_index", 1, row + 1, padded_cols);
  return ::swizzled_scale_offset(u32(row), u32(col), u32(padded_cols));
}

ScalePosition swizzled_scale_position(std::int64_t index, std::int64_t padded_cols) {
  if (padded_cols <= 0 || padded_cols % 4 != 0)
    fail("swizzled_scale_position: padded_cols = {} is not a positive multiple of 4", padded_cols);
  if (index < 0) fail("swizzled_scale_position: negative index {}", index);
  const std::int64_t tile = index / 512, r = index % 512, tiles_per_row = padded_cols / 4;
  return {(tile / tiles_per_row) * 128 + ((r % 16) / 4) * 32 + r / 16, (tile % tiles_per_row) * 4 + r % 4};
}

std::vector<std::uint8_t> swizzle_expert_scales(const std::vector<std::uint8_t>& linear, std::int64_t experts,
                                                std::int64_t rows, std::int64_t scale_cols) {
  check_shape("swizzle_scales", experts, rows, scale_cols);
  if (static_cast<std::int64_t>(linear.size()) != experts * rows * scale_cols)
    fail("swizzle_scales: the linear scales have {} bytes; [{}, {}, {}] needs {}", linear.size(), experts, rows,
         scale_cols, experts * rows * scale_cols);
  const std::int64_t kp = swizzled_padded_cols(scale_cols), per_expert = swizzled_padded_rows(rows) * kp;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(experts * per_expert), 0);
  for (std::int64_t e = 0; e < experts; ++e)
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t k = 0; k < scale_cols; ++k)
        out[e * per_expert + ::swizzled_scale_offset(u32(m), u32(k), u32(kp))] =
            linear[(e * rows + m) * scale_cols + k];
  return out;
}

std::vector<std::uint8_t> unswizzle_expert_scales(const std::vector<std::uint8_t>& swizzled, std::int64_t experts,
                                                  std::int64_t rows, std::int64_t scale_cols) {
  check_shape("unswizzle_scales", experts, rows, scale_cols);
  const std::int64_t kp = swizzled_padded_cols(scale_cols), per_expert = swizzled_padded_rows(rows) * kp;
  if (static_cast<std::int64_t>(swizzled.size()) != experts * per_expert)
    fail("unswizzle_scales: the swizzled scales have {} bytes; [{}, {}, {}] padded to [{}, {}, {}] needs {}",
         swizzled.size(), experts, rows, scale_cols, experts, swizzled_padded_rows(rows), kp, experts * per_expert);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(experts * rows * scale_cols));
  for (std::int64_t e = 0; e < experts; ++e)
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t k = 0; k < scale_cols; ++k)
        out[(e * rows + m) * scale_cols + k] = swizzled[e * per_expert + ::swizzled_scale_offset(u32(m), u32(k), u32(kp))];
  return out;
}

std::vector<std::uint8_t> swizzle_scales(const std::vector<std::uint8_t>& linear, std::int64_t rows,
                                         std::int64_t scale_cols) {
  return swizzle_expert_scales(linear, 1, rows, scale_cols);
}

std::vector<std::uint8_t> unswizzle_scales(const std::vector<std::uint8_t>& swizzled, std::int64_t rows,
                                           std::int64_t scale_cols) {
  return unswizzle_expert_scales(swizzled, 1, rows, scale_cols);
}

}  // namespace fp4cl
