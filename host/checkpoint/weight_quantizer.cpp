#include "checkpoint/weight_quantizer.hpp"

#include <cmath>

#include "common/quant_recipe.cl"
#include "support/check.hpp"

namespace fp4cl::detail {

std::vector<float> weight_values(const TensorView& weight) {
  if (weight.shape().size() != 2) {
    fail("'{}' in {} has shape {}: a linear weight is 2-D [out_features, in_features]", weight.name(),
         weight.file(), shape_string(weight.shape()));
  }
  std::vector<float> values;
  if (weight.dtype() == Dtype::bf16) {
    const std::vector<std::uint16_t> bits = weight.to_vector<std::uint16_t>(Dtype::bf16);
    values.resize(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_float(bits[i]);
  } else if (weight.dtype() == Dtype::f32) {
    values = weight.to_vector<float>();
  } else {
    fail("'{}' in {} is {}: only BF16 and F32 weights can be quantized", weight.name(), weight.file(),
         dtype_name(weight.dtype()));
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      fail("'{}' in {} holds {} at element {}: cannot quantize a non-finite weight", weight.name(),
           weight.file(), values[i], i);
    }
  }
  return values;
}

float tensor_amax(const std::vector<float>& values) {
  float amax = 0.0f;
  for (const float x : values) amax = ::fp4cl_amax_step(amax, x);
  return amax;
}

float nvfp4_global_scale(float amax, std::string_view tensor) {
  if (amax == 0.0f) return 1.0f;
  const float gs = 2688.0f / amax;  // 448·6, exact in fp32
  if (!std::isfinite(gs)) {
    fail("'{}': amax {} is too small for an FP32 NVFP4 global scale (448·6/amax overflows)", tensor, amax);
  }
  return gs;
}

std::uint8_t mxfp4_weight_scale_byte(float amax) {
  // round_to_power_2 on the FP32 bits: add 2^(23 - 1 - 1) (half an E2M1 mantissa step), keep sign
  // and exponent. An exponent field e' ≥ 1 is the power 2^(e' - 127), so E = 127 + (e' - 127) - 2;
  // e' = 0 (zero, or a tiny subnormal) is log2(0) = -inf. Both clamp at 0. (The largest finite
  // amax carries into e' = 255 and gets E = 253, still finite.)
  const std::uint32_t bits = ::fp4cl_as_uint(amax) & 0x7FFFFFFFu;
  const std::uint32_t field = ((bits + (1u << 21)) >> 23) & 0xFFu;
  return static_cast<std::uint8_t>(field < 2u ? 0u : field - 2u);
}

QuantizedRows quantize_weight(WeightFormat format, const std::vector<float>& values, std::int64_t rows,
                              std::int64_t cols, float gs_quant, std::string_view tensor) {
  const std::int64_t block = block_size(format);
  if (cols % block != 0) {
    fail("'{}': in_features = {} is not a multiple of the {} block size {}; exclude the module "
         "from quantization",
         tensor, cols, to_string(format), block);
  }
  if (static_cast<std::int64_t>(values.size()) != rows * cols) {
    fail("'{}': {} values for shape [{}, {}]", tensor, values.size(), rows, cols);
  }
  QuantizedRows q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.packed.resize(static_cast<std::size_t>(rows * cols / 2));
  q.scales.resize(static_cast<std::size_t>(rows * (cols / block)));
  if (format == WeightFormat::nvfp4) q.global_scale = 1.0f / gs_quant;
  const std::int64_t blocks = rows * (cols / block);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const float* x = &values[static_cast<std::size_t>(b * block)];
    float amax = 0.0f;
    for (std::int64_t i = 0; i < block; ++i) amax = ::fp4cl_amax_step(amax, x[i]);
    std::uint32_t byte;
    float mult;
    if (format == WeightFormat::nvfp4) {
      byte = ::nvfp4_scale_byte(amax, gs_quant);
      mult = ::nvfp4_multiplier(byte, gs_quant);
    } else {
      byte = mxfp4_weight_scale_byte(amax);
      mult = ::mxfp4_multiplier(byte);
    }
    q.scales[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(byte);
    std::uint8_t* out = &q.packed[static_cast<std::size_t>(b * block / 2)];
    for (std::int64_t i = 0; i < block; i += 2) {
      const std::uint32_t lo = ::fp4_encode_scaled(x[i], mult);
      const std::uint32_t hi = ::fp4_encode_scaled(x[i + 1], mult);
      out[i / 2] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
  return q;
}

}  // namespace fp4cl::detail
