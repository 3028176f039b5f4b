// The host reference dequantizer: w = e2m1(code) × scale × gs_d (FP4.md §3, §4).
#include "common/formats.cl"
#include "formats/argument_checks.hpp"
#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl {

std::vector<float> dequantize(const QuantizedRows& q) {
  check_fp4_shape("dequantize", q.format, q.rows, q.cols);
  check_global_scale("dequantize", "global_scale", q.format, q.global_scale);
  const std::int64_t block = q.block_size();
  if (static_cast<std::int64_t>(q.packed.size()) != q.rows * q.cols / 2)
    fail("dequantize: packed has {} bytes; [{}, {}] needs {}", q.packed.size(), q.rows, q.cols, q.rows * q.cols / 2);
  if (static_cast<std::int64_t>(q.scales.size()) != q.rows * q.scale_cols())
    fail("dequantize: scales has {} bytes; [{}, {}] needs {}", q.scales.size(), q.rows, q.scale_cols(),
         q.rows * q.scale_cols());
  const bool nvfp4 = q.format == WeightFormat::nvfp4;
  std::vector<float> out(static_cast<std::size_t>(q.rows * q.cols));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint8_t byte = q.scales[i / static_cast<std::size_t>(block)];
    const float scale = nvfp4 ? ::e4m3_decode(byte) : ::e8m0_decode(byte);
    out[i] = ::e2m1_decode(fp4_code_at(q.packed.data(), static_cast<std::int64_t>(i))) * scale * q.global_scale;
  }
  return out;
}

}  // namespace fp4cl
