// The "words" weight layout of the CPU GEMV with 16-lane vectors (kernels/linear_gemv_words.cl):
// rows in groups of 16, the 16 rows of a group side by side so that one vector lane serves one
// row, and every group's codes contiguous (a work-item streams its group's codes front to back).
//
//   codes   [ceil(n/16)][k/8][16] 32-bit words: word w of row r holds the row's elements
//           8w .. 8w+7 exactly as the checkpoint packs them (element 8w + j in bits 4j .. 4j+3 of
//           the little-endian word); an NVFP4 block with a negative scale has its codes' signs
//           flipped and its scale made positive.
//   scales  [ceil(n/16)][k/block][16] bytes: the block scales of the group's 16 rows side by side
//           (E4M3 magnitudes or E8M0 exponents). Rows past n hold zero codes and zero scales.
// Made on the host once, at load, then uploaded.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

constexpr std::int64_t kFp4WordRows = 16;   // rows per group (vector lanes)
constexpr std::int64_t kFp4WordChunk = 16;  // elements per chunk of the kernel's loop

struct Fp4WordsLayoutInfo {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t n = 0, k = 0, groups = 0;
  int scale_shift = 0, exp_bias = 0;  // MXFP4 scales relative to the largest (fp4_row_layout.hpp)
};

struct Fp4WordsLayout {
  Fp4WordsLayoutInfo info;
  std::vector<std::uint32_t> codes;
  std::vector<std::uint8_t> scales;
};

Fp4WordsLayout make_fp4_words_layout(const Fp4Weight& weight);

struct DeviceFp4WordsLayout {
  Fp4WordsLayoutInfo info;
  cl::Buffer codes, scales;
  std::uint64_t bytes = 0;  // codes + scales
};
DeviceFp4WordsLayout upload_fp4_words_layout(const Context& ctx, const Fp4WordsLayout& layout);

}  // namespace fp4cl
