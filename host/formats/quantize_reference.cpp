// The host reference quantizers (FP4.md §3 NVFP4, §4 MXFP4): per block, the recipe steps of
// kernels/common/quant_recipe.cl, the same code the quantize kernels compile.
#include "common/quant_recipe.cl"
#include "formats/argument_checks.hpp"
#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

QuantizedRows empty_result(const char* what, WeightFormat format, const std::vector<std::uint16_t>& bf16,
                           std::int64_t rows, std::int64_t cols) {
  check_fp4_shape(what, format, rows, cols);
  const int block = block_size(format);
  if (static_cast<std::int64_t>(bf16.size()) != rows * cols)
    fail("{}: bf16 has {} values; [rows {}, cols {}] needs {}", what, bf16.size(), rows, cols, rows * cols);
  QuantizedRows q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.packed.resize(static_cast<std::size_t>(rows * cols / 2));
  q.scales.resize(static_cast<std::size_t>(rows * (cols / block)));
  return q;
}

// Quantizes every block of q: `scale_byte(amax)` gives the stored scale, `multiplier(byte)` the
// factor applied to each element before E2M1 encoding.
template <typename ScaleByte, typename Multiplier>
void quantize_blocks(const std::vector<std::uint16_t>& bf16, QuantizedRows& q, ScaleByte scale_byte,
                     Multiplier multiplier) {
  const std::int64_t block = q.block_size(), blocks = q.rows * q.scale_cols();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint16_t* x = &bf16[static_cast<std::size_t>(b * block)];
    float amax = 0.0f;
    for (std::int64_t i = 0; i < block; ++i) amax = ::fp4cl_amax_step(amax, ::bf16_to_float(x[i]));
    const std::uint32_t byte = scale_byte(amax);
    const float mult = multiplier(byte);
    q.scales[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(byte);
    std::uint8_t* out = &q.packed[static_cast<std::size_t>(b * block / 2)];
    for (std::int64_t i = 0; i < block; i += 2) {
      const std::uint32_t lo = ::fp4_encode_scaled(::bf16_to_float(x[i]), mult);
      const std::uint32_t hi = ::fp4_encode_scaled(::bf16_to_float(x[i + 1]), mult);
      out[i / 2] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace

QuantizedRows quantize_nvfp4(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t cols,
                             float gs_quant) {
  check_global_scale("quantize_nvfp4", "gs_quant", WeightFormat::nvfp4, gs_quant);
  QuantizedRows q = empty_result("quantize_nvfp4", WeightFormat::nvfp4, bf16, rows, cols);
  q.global_scale = 1.0f / gs_quant;
  quantize_blocks(
      bf16, q, [gs_quant](float amax) { return ::nvfp4_scale_byte(amax, gs_quant); },
      [gs_quant](std::uint32_t byte) { return ::nvfp4_multiplier(byte, gs_quant); });
  return q;
}

QuantizedRows quantize_mxfp4(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t cols) {
  QuantizedRows q = empty_result("quantize_mxfp4", WeightFormat::mxfp4, bf16, rows, cols);
  quantize_blocks(
      bf16, q, [](float amax) { return ::mxfp4_scale_byte(amax); },
      [](std::uint32_t byte) { return ::mxfp4_multiplier(byte); });
  return q;
}

QuantizedRows quantize(WeightFormat format, const std::vector<std::uint16_t>& bf16, std::int64_t rows,
                       std::int64_t cols, float gs_quant) {
  if (format == WeightFormat::nvfp4) return quantize_nvfp4(bf16, rows, cols, gs_quant);
  check_global_scale("quantize", "gs_quant", format, gs_quant);
  return quantize_mxfp4(bf16, rows, cols);
}

}  // namespace fp4cl
