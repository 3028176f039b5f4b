// The "split layout" of the GPU GEMV kernels (kernels/common/fp4_split.cl; used by the MoE split
// strategy, kernels/moe_split.cl, and the linear split GEMV, kernels/linear_gemv_split.cl): every
// row of K elements split over L lanes, lane l of step s holding the 32 elements
// s·32L + 4L·q + 4l + c (q = 0..7, c = 0..3) as one uint4, and per step G = max(1, 4L/block)
// groups of 8 block-scale bytes (the checkpoint's E4M3 / E8M0 bytes, unchanged).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/source_rows.hpp"

namespace fp4cl {

// Lanes per row for a reduction length k: the largest power of two <= 32 with k % (32·lanes) == 0
// (0 when k is not a multiple of 32).
int split_lanes(std::int64_t k);

// The split layout of rows stacked as [E, N, K] (host side, for upload and for tests): `packed`
// holds E·N rows of K/2 bytes (the checkpoint's nibble order), `scales` E·N rows of K/block
// bytes. `lanes` = L (0: split_lanes(K)); K must be a multiple of 32·L. A mapped `source`
// (prepare/source_rows.hpp, its rows = N) reads the E·N rows from a larger stack instead (FC1's
// gate or up half of every expert, in place). Rows are laid out on host_threads() threads where
// there are enough of them; the same bits at any count.
struct SplitLayout {
  std::vector<std::uint32_t> words;   // E·N·K/8
  std::vector<std::uint8_t> scales;   // E·N · K/(32L) steps · G · 8
};
SplitLayout split_layout(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales,
                         std::int64_t E, std::int64_t N, std::int64_t K, std::int64_t block, int lanes = 0,
                         const SourceRows& source = {});

// MXFP4 block scales are decoded as 2^(byte + scale_exp - 127): the scale_exp that comes as close
// to undoing the E2M1 decode's 2^e2m1_exp as the biased scale bytes [lo, hi] allow. Hard limits:
// every decoded scale is a normal fp32 number and no weight × scale product overflows.
int mxfp4_decode_scale_exp(unsigned lo, unsigned hi, int e2m1_exp);
// Whether that exponent works for bytes [lo, hi]: the smallest scale stays normal and the
// output factor 2^-(scale_exp + e2m1_exp) stays within 2^±32.
bool mxfp4_decode_scale_exp_fits(unsigned lo, int scale_exp, int e2m1_exp);

// A linear layer's weight [n, k] in the split layout (kernels/linear_gemv_split.cl): K padded
// with zero codes to kpad = k rounded up to 32, L = min(max_lanes, split_lanes(kpad)) lanes.
// Block scales decode as s × 2^scale_exp (NVFP4: 2^119 with the subnormal E2M1 decode, e2m1_exp =
// -126, else 1; MXFP4: mxfp4_decode_scale_exp over the blocks that hold a nonzero code, whose
// range fp4_scale_offsets checks; the scale bytes of all-zero blocks are replaced by the largest
// one, so that every decoded scale is a normal number). The kernel's output factor carries
// 2^-(scale_exp + e2m1_exp).
struct Fp4SplitWeight {
  std::int64_t n = 0, k = 0, kpad = 0;
  int lanes = 1, scale_exp = 0, e2m1_exp = -126;
  SplitLayout layout;
};
Fp4SplitWeight make_fp4_split_weight(const Fp4Weight& weight, int max_lanes, int e2m1_exp);

}  // namespace fp4cl
