// The "words" weight layout of the CPU GEMV with 16-lane vectors (kernels/linear_gemv_words.cl),
// and with 8 rows in checkpoint order that of gemv_denorm (kernels/linear_gemv_denorm.cl): rows in
// groups of 16 (or 8) as vector lanes (fp4_lane_groups.hpp: the group order and the block
// scales, [ceil(n/16)][k/block][16]).
//
//   codes   [ceil(n/16)][k/8][16] 32-bit words: word w of row r holds the row's elements
//           8w .. 8w+7 in "pair order" (fp4_words_pair_order): element 8w + 2p in bits 4p .. 4p+3
//           and element 8w + 2p + 1 in bits 4p+16 .. 4p+19 (p = 0..3), so that the word shifted
//           right by 4p holds the pair (2p, 2p + 1) at the bottom of its two 16-bit halves (the
//           kernel's BF16 dot products: one shift and one vpermw per pair, the activation pair
//           being adjacent BF16 values); an NVFP4 block with a negative scale has its codes'
//           signs flipped and its scale made positive.
// Made on the host once, at load, then uploaded (upload_fp4_layout).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/fp4_lane_groups.hpp"

namespace fp4cl {

constexpr std::int64_t kFp4WordRows = 16;   // rows per group (vector lanes)
constexpr std::int64_t kFp4WordChunk = 16;  // elements per chunk of the kernel's loop

struct Fp4WordsLayout {
  Fp4LaneGroupsInfo info;
  std::vector<std::uint32_t> codes;
  std::vector<std::uint8_t> scales;
};

// `rows` per group (16: gemv_words; 8: gemv_denorm) and the nibble order: pair order (above), or
// the checkpoint's (element 8w + j in bits 4j .. 4j+3: gemv_denorm's shift decode).
enum class Fp4WordsOrder { pairs, checkpoint };
Fp4WordsLayout make_fp4_words_layout(const Fp4Weight& weight, std::int64_t rows = kFp4WordRows,
                                     Fp4WordsOrder order = Fp4WordsOrder::pairs);

// A checkpoint word (element j in bits 4j .. 4j+3) in pair order (above).
std::uint32_t fp4_words_pair_order(std::uint32_t checkpoint_word);

}  // namespace fp4cl
