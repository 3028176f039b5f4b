// FP4 number formats on the host (../shared/spec/FP4.md §1–§4, §7): scalar codecs, nibble
// packing, the 128×4 swizzled scale layout, and the reference quantizers the OpenCL kernels are
// tested against. The codecs and the quantization recipe are the very code the kernels compile
// (kernels/common/formats.cl and quant_recipe.cl), so host and device agree bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/scheme.hpp"

namespace fp4cl {

// ---------------------------------------------------------------- scalar codecs

// E2M1 (the FP4 element): the low 4 bits of `code`. 0x8 is negative zero (decodes as -0.0).
float e2m1_to_float(std::uint8_t code);
// Round to nearest, ties to even, saturating at ±6; the sign bit is the input's (so -0.1 gives
// 0x8). NaN gives ±6 (E2M1 has no NaN).
std::uint8_t float_to_e2m1(float x);

// E4M3fn (the NVFP4 block scale): 0x7F and 0xFF are NaN, 448 is the largest finite value.
float e4m3_to_float(std::uint8_t byte);
// |x| clamped to 448, then round to nearest even ("satfinite"); the sign is kept; NaN gives 0x7F
// with the input's sign. A finite input never gives NaN.
std::uint8_t float_to_e4m3(float x);

// E8M0 (the MXFP4 block scale): 2^(byte-127); 0xFF is NaN.
float e8m0_to_float(std::uint8_t byte);
// The nearest power of two, ties (1.5·2^e) rounded up, saturating to [2^-127, 2^127]
// (±0 gives 0x00, +Inf 0xFE); negative numbers and NaN give 0xFF (NaN).
std::uint8_t float_to_e8m0(float x);

// BF16, stored as its 16 bits: the upper half of an IEEE float32.
float bf16_to_float(std::uint16_t bits);
// Round to nearest, ties to even; NaN stays NaN, ±Inf stays ±Inf.
std::uint16_t float_to_bf16(float x);

// ---------------------------------------------------------------- nibble packing

// Packs E2M1 codes (one per byte, each < 16) two to a byte: element 2i in the low nibble,
// element 2i+1 in the high nibble (FP4.md §2). Throws fp4cl::Error for an odd count or a code
// above 15.
std::vector<std::uint8_t> pack_fp4(const std::vector<std::uint8_t>& codes);
// The inverse: 2 codes per byte, low nibble first.
std::vector<std::uint8_t> unpack_fp4(const std::vector<std::uint8_t>& packed);
// Element `index` of packed codes.
inline std::uint8_t fp4_code_at(const std::uint8_t* packed, std::int64_t index) {
  return static_cast<std::uint8_t>((packed[index / 2] >> (4 * (index % 2))) & 0xF);
}

// ---------------------------------------------------------------- block scale layouts

// How a [rows, scale_cols] block-scale matrix is laid out in memory.
enum class ScaleLayout {
  linear,    // row-major [rows, scale_cols], as checkpoints store it
  swizzled,  // 128×4 tiles (FP4.md §7): rows padded to 128, columns to 4, padding zero
};
const char* to_string(ScaleLayout layout);

std::int64_t swizzled_padded_rows(std::int64_t rows);        // roundup(rows, 128)
std::int64_t swizzled_padded_cols(std::int64_t scale_cols);  // roundup(scale_cols, 4)
// Bytes of one matrix's scales in `layout` (for swizzled, padded_rows × padded_cols).
std::int64_t scale_bytes(ScaleLayout layout, std::int64_t rows, std::int64_t scale_cols);

// The byte offset of scale (row, col) in the swizzled layout with `padded_cols` columns, and its
// inverse (a padding byte maps to a row ≥ rows or a column ≥ scale_cols).
std::int64_t swizzled_scale_index(std::int64_t row, std::int64_t col, std::int64_t padded_cols);
struct ScalePosition {
  std::int64_t row = 0, col = 0;
};
ScalePosition swizzled_scale_position(std::int64_t index, std::int64_t padded_cols);

// Whole matrices: linear [rows, scale_cols] → swizzled (padding zero), and back (padding dropped).
// Throws fp4cl::Error when the input's size does not match the shape.
std::vector<std::uint8_t> swizzle_scales(const std::vector<std::uint8_t>& linear, std::int64_t rows,
                                         std::int64_t scale_cols);
std::vector<std::uint8_t> unswizzle_scales(const std::vector<std::uint8_t>& swizzled, std::int64_t rows,
                                           std::int64_t scale_cols);
// Stacked experts [experts, rows, scale_cols]: each expert swizzled and padded on its own, the
// experts concatenated (expert e starts at e × padded_rows × padded_cols).
std::vector<std::uint8_t> swizzle_expert_scales(const std::vector<std::uint8_t>& linear, std::int64_t experts,
                                                std::int64_t rows, std::int64_t scale_cols);
std::vector<std::uint8_t> unswizzle_expert_scales(const std::vector<std::uint8_t>& swizzled, std::int64_t experts,
                                                  std::int64_t rows, std::int64_t scale_cols);

// The sizes of an FP4 matrix [rows, cols] in memory: packed codes plus block scales in a layout.
struct Fp4MatrixShape {
  WeightFormat format = WeightFormat::nvfp4;
  ScaleLayout scale_layout = ScaleLayout::linear;
  std::int64_t rows = 0;
  std::int64_t cols = 0;  // a multiple of the block size

  std::int64_t scale_cols() const { return cols / block_size(format); }
  std::int64_t packed_bytes() const { return rows * cols / 2; }
  std::int64_t scale_bytes() const { return fp4cl::scale_bytes(scale_layout, rows, scale_cols()); }
};

// ---------------------------------------------------------------- quantized rows

// A [rows, cols] matrix in NVFP4 or MXFP4: what a quantizer produces and what a linear layer or a
// checkpoint writer consumes. Scales are in the linear layout; swizzle_scales() converts them.
struct QuantizedRows {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t rows = 0;
  std::int64_t cols = 0;              // a multiple of the block size
  std::vector<std::uint8_t> packed;   // [rows, cols/2], element 2i in the low nibble
  std::vector<std::uint8_t> scales;   // [rows, cols/block]: E4M3 (NVFP4) or E8M0 (MXFP4) bytes
  float global_scale = 1.0f;          // gs_d, the dequant direction (NVFP4); 1 for MXFP4

  int block_size() const { return fp4cl::block_size(format); }
  std::int64_t scale_cols() const { return cols / block_size(); }
};

// The reference quantizers (FP4.md §3 and §4), run on the host. `bf16` holds [rows, cols] BF16
// values row-major. NVFP4 takes the quant-direction global scale gs_q (finite, > 0) and stores
// gs_d = 1/gs_q in the result; MXFP4 has no global scale. Throws fp4cl::Error naming the argument
// when cols is not a multiple of the block size, bf16 has the wrong size, or gs_q is invalid.
QuantizedRows quantize_nvfp4(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t cols,
                             float gs_quant);
QuantizedRows quantize_mxfp4(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t cols);
// Either format; for MXFP4 gs_quant must be 1 (it has no global scale to apply it to).
QuantizedRows quantize(WeightFormat format, const std::vector<std::uint16_t>& bf16, std::int64_t rows,
                       std::int64_t cols, float gs_quant = 1.0f);

// w = e2m1(code) × scale × gs_d, evaluated left to right in fp32 (the first product is exact),
// as [rows, cols] floats. Throws fp4cl::Error when the vectors do not match the shape or the
// global scale is not valid for the format (finite and > 0 for NVFP4, 1 for MXFP4).
std::vector<float> dequantize(const QuantizedRows& q);

}  // namespace fp4cl
