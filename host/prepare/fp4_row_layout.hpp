// The "rows" weight layout of the FP4 GEMV and GEMM kernels (kernels/common/fp4_dot.cl): each
// weight row's codes padded to a multiple of 64 elements with E2M1 magnitude codes 0 and 1 swapped
// (the kernels' decode), block scales in the 128×4 swizzled layout (FP4.md §7), and for MXFP4 the
// exponent offset that keeps every decoded weight a normal fp32 number. Made on the host once, at
// load, then uploaded.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"
#include "prepare/fp4_device_layout.hpp"

namespace fp4cl {

// Elements per step of the kernels' inner loops (FP4CL_STEP in fp4_dot.cl).
constexpr std::int64_t kFp4RowStep = 64;

struct Fp4RowLayoutInfo {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t n = 0, k = 0;
  std::int64_t kpad = 0;       // k rounded up to kFp4RowStep
  std::uint32_t scale_kp = 0;  // block columns of the swizzled scales (k / block rounded up to 4)
  // MXFP4: the kernels take block scales relative to the largest exponent E_max over the blocks
  // that hold a nonzero code, 2^(E - E_max), built as the exponent field E + exp_bias
  // (fp4_block_scales); the epilogue multiplies by 2^scale_shift = 2^(E_max - 127). NVFP4: 0, 0.
  int scale_shift = 0;
  int exp_bias = 0;
};

struct Fp4RowLayout {
  Fp4RowLayoutInfo info;
  std::vector<std::uint8_t> codes;   // [n, kpad / 2], magnitude codes 0 and 1 swapped
  std::vector<std::uint8_t> scales;  // swizzled, roundup(n, 128) × scale_kp bytes
};

// Throws fp4cl::Error when an MXFP4 layer's nonzero blocks span more than 2^125 (the kernels keep
// every decoded weight a normal fp32 number relative to the largest block).
Fp4RowLayout make_fp4_row_layout(const Fp4Weight& weight);

// The MXFP4 scale offsets of Fp4RowLayoutInfo (scale_shift, exp_bias) for a weight; {0, 0} for
// NVFP4 and for an all-zero weight. Throws as make_fp4_row_layout does.
struct Fp4ScaleOffsets {
  int scale_shift = 0, exp_bias = 0;
};
Fp4ScaleOffsets fp4_scale_offsets(const Fp4Weight& weight);

// The layout on the device (upload_fp4_layout).
using DeviceFp4RowLayout = DeviceFp4Layout<Fp4RowLayoutInfo>;

}  // namespace fp4cl
