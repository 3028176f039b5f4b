// Reading FP32 global scales and converting their direction, once, at load.
#include "prepare/global_scales.hpp"

#include <cmath>

#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

bool finite_positive(float x) { return std::isfinite(x) && x > 0.0f; }

}  // namespace

GlobalScale read_global_scale(const TensorView& tensor, ScaleDirection stored) {
  if (stored == ScaleDirection::none) {
    fail("tensor '{}' in '{}': a global scale read for a scheme without global scales", tensor.name(), tensor.file());
  }
  const float value = tensor.scalar_f32();
  const char* formula = stored == ScaleDirection::dequant ? "gs_d = amax / (448·6)" : "gs_q = 448·6 / amax";
  if (!finite_positive(value)) {
    fail("tensor '{}' in '{}': global scale is {}; expected a finite positive F32 ({} direction, {})", tensor.name(),
         tensor.file(), value, to_string(stored), formula);
  }
  const float inverse = 1.0f / value;
  if (!finite_positive(inverse)) {
    fail(
        "tensor '{}' in '{}': global scale {} has no finite positive fp32 reciprocal (1/{} = {}); expected a "
        "finite positive F32 ({} direction, {}) whose inverse is finite",
        tensor.name(), tensor.file(), value, value, inverse, to_string(stored), formula);
  }
  GlobalScale s;
  if (stored == ScaleDirection::dequant) {
    s.dequant = value;
    s.quant = inverse;
  } else {
    s.quant = value;
    s.dequant = inverse;
  }
  return s;
}

const GlobalScale& wider(const GlobalScale& a, const GlobalScale& b) {
  if (a.dequant != b.dequant) return a.dequant > b.dequant ? a : b;
  return a.quant <= b.quant ? a : b;
}

}  // namespace fp4cl::detail
