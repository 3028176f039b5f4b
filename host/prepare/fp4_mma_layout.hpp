// The "MMA layout" of the tensor-core MoE kernels (kernels/moe_mma.cl, kernels/common/fp4_mma.cl):
// the FP4 codes of a matrix arranged so that each lane of a 32-lane warp loads, with one uint4 a
// chunk, the A-fragment elements of four m16n8k16 MMAs (PTX `mma.sync ... .bf16`, row-major A:
// 16 rows × 16 k), already in the pairs the fragment registers hold.
//
// Matrix [R, K] (R = E·N stacked rows, R % 16 == 0, K % 64 == 0), row tile rt = 16 rows, chunk c =
// 64 elements of k; lane = 4g + t (g = 0..7, t = 0..3); word j (0..3) of a lane's uint4 feeds MMA j
// of the chunk. The four MMAs of a chunk do not take k16 tiles of k in order: the k of each
// fragment slot is chosen so that lane t's elements are the 16 elements 16t .. 16t + 15 of the
// chunk (k-slot s of MMA j is k = 64·c + 16·(s % 8 / 2) + 4·j + 2·(s / 8) + s % 2; the B fragments
// use the same map). So a lane reads its activations as 8 consecutive BF16 pairs (two 16-byte
// loads a chunk instead of eight 4-byte ones) and all its weights of a chunk lie in one block
// (NVFP4 block t, MXFP4 block t / 2): two scales a chunk, not eight. Word j holds the codes of
// fragment register a_i's two elements h = 0, 1 (i = 0..3; "nibble" 4h + i below):
//   row 16·rt + g + 8·(i & 1),  k = 64·c + 16·t + 4·j + 2·(i >> 1) + h
// not as nibbles but bit by bit where the kernel decodes them with few instructions
// (common/fp4_mma.cl, fp4_mma_pair): in half h of the word (bits 16h ..), the code's magnitude
// bits (E2M1 bits 2..0) at bits 16h + kMmaMagnitudeBit[i] + 2 .. 16h + kMmaMagnitudeBit[i] and its
// sign bit at 16h + kMmaSignBit[i]. Words: [R/16][K/64][32 lanes][4] uint32.
//
// Block scales, per (rt, c) 8 groups g of the bytes of rows 16·rt + g and 16·rt + g + 8:
//   NVFP4 (block 16): 8 bytes, byte 4·half + j = row g + 8·half, block 4c + j;
//   MXFP4 (block 32): 4 bytes, byte 2·half + jj = row g + 8·half, block 2c + jj.
// Scales: [R/16][K/64][8][8 or 4] bytes. MXFP4 keeps the checkpoint's E8M0 bytes. NVFP4 stores
// not the E4M3 byte but its magnitude as a normalized code (mma_nvfp4_scale_code) that the kernel
// turns into a BF16 number with one multiply-add: code × 16 puts its exponent and mantissa where
// a BF16 number's are (common/fp4_mma.cl, fp4_mma_scale_pair). A negative scale's sign moves into
// its block's codes (each code's sign bit flipped: s × w = |s| × (−w), exactly), and a zero
// scale's block keeps only its codes' sign bits (code 0 decodes as a nonzero scale; zero codes
// make every product ±0, as the zero scale does). So the layout's codes are the checkpoint's
// only where a block's scale is positive.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/source_rows.hpp"
#include "support/uninitialized_allocator.hpp"

namespace fp4cl {

// Bit positions of a word's codes (above): a_0's magnitude bits sit where a BF16 number's bits
// 8..6 are and its sign where the BF16 sign is; a_1's three bits lower, a_2's three higher,
// a_3's at the bottom.
inline constexpr int kMmaMagnitudeBit[4] = {6, 3, 9, 0};
inline constexpr int kMmaSignBit[4] = {15, 12, 14, 13};

// The code of "nibble" 4h + i in a word of the layout, and the word's bits of that code.
std::uint32_t mma_code(std::uint32_t word, int nibble);
std::uint32_t mma_code_bits(std::uint32_t code, int nibble);

// The MMA layout's byte for an NVFP4 block scale with E4M3 byte `e4m3`: |s| = 1.mmm × 2^e (e in
// -9..8, E4M3 subnormals normalized) as (e + 9) << 3 | mmm; 0 for a zero scale. Fails on NaN.
// The kernel decodes it as the BF16 number |s| × 2^scale_exp with bits code × 16 + (scale_exp +
// 118) << 7.
std::uint8_t mma_nvfp4_scale_code(std::uint8_t e4m3);
// A checkpoint byte of two codes (one block) as the MMA layout holds them under NVFP4 scale `e4m3`.
std::uint8_t mma_nvfp4_codes(std::uint8_t packed, std::uint8_t e4m3);

struct MmaLayout {
  std::vector<std::uint32_t, UninitializedAllocator<std::uint32_t>> words;  // R·K/8
  std::vector<std::uint8_t, UninitializedAllocator<std::uint8_t>> scales;   // R/16 · K/64 · 8 · (64/block)
};

// `packed`: the source's rows of K/2 bytes (the checkpoint's nibble order: element k in byte k/2,
// low nibble first), `scales`: its rows of K/block bytes; `source`: which of them the layout's R
// rows are (prepare/source_rows.hpp). Fails unless R % 16 == 0, K % 64 == 0, block is 16 or 32 and
// the source rows fit.
MmaLayout mma_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales, std::int64_t R,
                     std::int64_t K, std::int64_t block, const SourceRows& source = {});

// Where element (row, k) of the matrix lands: words index and "nibble" 4h + i (its bits:
// mma_code_bits; tests, debugging).
struct MmaPosition {
  std::int64_t word = 0;
  int nibble = 0;
};
MmaPosition mma_position(std::int64_t row, std::int64_t k, std::int64_t K);

// A linear layer's weight [N, K] in the MMA layout (kernels/linear_mma.cl), with the exponent its
// block scales are decoded with: a block scale s becomes the BF16 number s × 2^scale_exp and an
// E2M1 code e2m1 × 2^-126 (common/fp4_mma.cl), so the products carry 2^(scale_exp - 126), which
// the kernel's epilogue undoes. NVFP4: scale_exp 119 (E4M3 values in [2^-9, 448] stay normal);
// MXFP4: mxfp4_decode_scale_exp over the blocks that hold a nonzero code (all-zero blocks take
// the largest exponent, as in the split layout), so that every decoded scale is a normal BF16
// number. Fails, naming the weight, when N % 16 != 0, K % 64 != 0 or the MXFP4 scales are too wide.
struct Fp4MmaWeight {
  std::int64_t n = 0, k = 0;
  int scale_exp = 0;
  MmaLayout layout;
};
Fp4MmaWeight make_fp4_mma_weight(const Fp4Weight& weight);

}  // namespace fp4cl
