// Which rows of a stacked weight tensor a layout reads: FC1's gate or up half of every expert read
// in place from w13 [E, 2I, K], without copying the half out first.
#pragma once

#include <cstdint>

namespace fp4cl {

// Row r of the layout's R rows is source row (r / rows) · stride + first + r % rows: rows first ..
// first + rows - 1 of each matrix of an [R / rows, stride, K] stack. The default (rows 0): the R
// rows as they are.
struct SourceRows {
  std::int64_t rows = 0, stride = 0, first = 0;

  bool mapped() const { return rows != 0; }
  // Whether the mapping tiles R layout rows: whole matrices, each within its stride.
  bool fits(std::int64_t R) const {
    return !mapped() || (rows > 0 && R % rows == 0 && first >= 0 && first + rows <= stride);
  }
  // The rows the source holds for R layout rows.
  std::int64_t source_rows(std::int64_t R) const { return mapped() ? R / rows * stride : R; }
  std::int64_t operator()(std::int64_t r) const { return mapped() ? r / rows * stride + first + r % rows : r; }
};

}  // namespace fp4cl
