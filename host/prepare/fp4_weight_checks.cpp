#include "prepare/fp4_weight_checks.hpp"

#include <cmath>
#include <limits>

#include "support/check.hpp"

namespace fp4cl {

namespace {

void check_global_scale(float v, const char* field, const char* direction) {
  if (!std::isfinite(v) || !(v > 0.0f))
    fail("Fp4Weight::{} = {} ({} direction): a global scale must be a positive finite number", field, v, direction);
}

}  // namespace

void check_activation_scale_pair(float input_scale, float input_global_scale, const std::string& what) {
  // A correctly rounded reciprocal is within half an ulp (2^-24 relative); 2^-20 leaves room for
  // a scale that was itself computed (1/(1/x)) while catching any scale set without its partner.
  const double product = static_cast<double>(input_scale) * static_cast<double>(input_global_scale);
  if (!(std::fabs(product - 1.0) <= 0x1p-20))
    fail("{}: input_scale = {} (dequant direction) and input_global_scale = {} (quant direction) are not "
         "reciprocals (product {}): the two directions of one activation scale must be set together, e.g. with "
         "set_input_scales_from_quant()",
         what, input_scale, input_global_scale, product);
}

void check_linear_weight(const Fp4Weight& w, const QuantScheme& scheme) {
  if (w.format != scheme.weight)
    fail("the weight is {} but the scheme is {}: the scheme's weight format must match the weight's",
         to_string(w.format), scheme.name());
  const std::int64_t block = block_size(w.format);
  if (w.n < 1) fail("Fp4Weight::n = {}: a linear layer needs at least one output feature", w.n);
  if (w.k < 1 || w.k % block != 0)
    fail("Fp4Weight::k = {}: {} needs in_features to be a positive multiple of its block size {}", w.k,
         to_string(w.format), block);
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
  if (w.n > kMaxElements / w.k) fail("Fp4Weight [{}, {}]: too many elements", w.n, w.k);
  if (w.n > std::numeric_limits<std::int32_t>::max() || w.k > std::numeric_limits<std::int32_t>::max())
    fail("Fp4Weight [{}, {}]: n and k must fit 32 bits", w.n, w.k);
  const auto packed_bytes = static_cast<std::size_t>(w.n * (w.k / 2));
  if (w.packed.size() != packed_bytes)
    fail("Fp4Weight::packed has {} bytes; [{}, {}] FP4 weights need n·k/2 = {}", w.packed.size(), w.n, w.k,
         packed_bytes);
  const auto scale_bytes = static_cast<std::size_t>(w.n * (w.k / block));
  if (w.scales.size() != scale_bytes)
    fail("Fp4Weight::scales has {} bytes; [{}, {}] {} weights need n·k/{} = {} block scales", w.scales.size(), w.n,
         w.k, to_string(w.format), block, scale_bytes);

  const std::int64_t blocks = w.k / block;
  for (std::size_t i = 0; i < w.scales.size(); ++i) {
    const std::uint8_t b = w.scales[i];
    const bool nan = w.format == WeightFormat::nvfp4 ? (b & 0x7F) == 0x7F : b == 0xFF;
    if (nan)
      fail("Fp4Weight::scales: the block scale of row {}, block {} is 0x{:02X}, a NaN in {}", static_cast<std::int64_t>(i) / blocks,
           static_cast<std::int64_t>(i) % blocks, b, w.format == WeightFormat::nvfp4 ? "E4M3" : "E8M0");
  }

  if (w.format == WeightFormat::nvfp4) {
    check_global_scale(w.global_scale, "global_scale", "dequant");
    if (!scheme.w4a16()) {
      check_global_scale(w.input_global_scale, "input_global_scale", "quant");
      check_global_scale(w.input_scale, "input_scale", "dequant");
      check_activation_scale_pair(w.input_scale, w.input_global_scale, "Fp4Weight");
    }
  } else {
    if (w.global_scale != 1.0f)
      fail("Fp4Weight::global_scale = {}: MXFP4 has no global scale, it must be 1", w.global_scale);
    if (!scheme.w4a16() && (w.input_global_scale != 1.0f || w.input_scale != 1.0f))
      fail("Fp4Weight::input_global_scale = {}, input_scale = {}: MXFP4 activations have no global scale, both "
           "must be 1",
           w.input_global_scale, w.input_scale);
  }
}

}  // namespace fp4cl
