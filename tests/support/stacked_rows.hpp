// Rows first .. first + rows - 1 of each matrix of an [E, stride, K] stack of FP4 codes and block
// scales, copied out into an [E, rows, K] stack: what a layout that reads them in place must
// equal (FC1's gate or up half of every expert).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4cl::test {

struct StackedRows {
  std::vector<std::uint8_t> packed, scales;
};

inline StackedRows copy_stacked_rows(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales,
                                     std::int64_t E, std::int64_t stride, std::int64_t first, std::int64_t rows,
                                     std::int64_t K, std::int64_t block) {
  StackedRows out;
  for (std::int64_t e = 0; e < E; ++e) {
    const auto p0 = packed.begin() + static_cast<std::ptrdiff_t>((e * stride + first) * K / 2);
    out.packed.insert(out.packed.end(), p0, p0 + static_cast<std::ptrdiff_t>(rows * K / 2));
    const auto s0 = scales.begin() + static_cast<std::ptrdiff_t>((e * stride + first) * K / block);
    out.scales.insert(out.scales.end(), s0, s0 + static_cast<std::ptrdiff_t>(rows * K / block));
  }
  return out;
}

}  // namespace fp4cl::test
