#include "reference/linear_reference.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/quant_recipe.cl"

namespace fp4cl::reference {

namespace {

unsigned code_at(const std::vector<std::uint8_t>& packed, std::int64_t row_bytes, std::int64_t i, std::int64_t j) {
  const std::uint8_t byte = packed[static_cast<std::size_t>(i * row_bytes + j / 2)];
  return (j % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
}

double scale_value(WeightFormat format, std::uint8_t byte) {
  return format == WeightFormat::nvfp4 ? static_cast<double>(e4m3_decode(byte)) : static_cast<double>(e8m0_decode(byte));
}

}  // namespace

namespace {
// e2m1 × block scale, without the global scale (exact).
double block_scaled_weight(const Fp4Weight& w, std::int64_t n, std::int64_t k) {
  const std::int64_t block = block_size(w.format);
  const double e2m1 = e2m1_decode(code_at(w.packed, w.k / 2, n, k));
  return e2m1 * scale_value(w.format, w.scales[static_cast<std::size_t>(n * (w.k / block) + k / block)]);
}
}  // namespace

void w4a16_int_grid_values(const double* x, std::int64_t count, int chunk, double* out) {
  for (std::int64_t c = 0; c < count; c += chunk) {
    const std::int64_t end = std::min(count, c + chunk);
    double largest = 0.0;
    bool finite = true;
    for (std::int64_t i = c; i < end; ++i) {
      finite = finite && std::isfinite(x[i]);
      largest = std::max(largest, std::fabs(x[i]));
    }
    for (std::int64_t i = c; i < end; ++i) out[i] = x[i];
    if (!finite || largest == 0.0) continue;
    int e = 0;
    std::frexp(largest, &e);  // largest < 2^e
    e = std::max(e, -125);
    // At most 7 significant bits where it rounds (|q| < 2^7 there): a BF16 number, exactly.
    for (std::int64_t i = c; i < end; ++i) out[i] = std::ldexp(std::nearbyint(std::ldexp(x[i], 14 - e)), e - 14);
  }
}

std::vector<std::uint16_t> w4a16_int_grid(const std::uint16_t* x_bf16, std::int64_t count) {
  std::vector<double> v(static_cast<std::size_t>(count)), g(v.size());
  for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = bf16_to_float(x_bf16[i]);
  w4a16_int_grid_values(v.data(), count, 16, g.data());
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = std::isnan(v[i]) ? x_bf16[i] : static_cast<std::uint16_t>(float_to_bf16(static_cast<float>(g[i])));
  return out;
}

double output_bound(const LinearOutput& o, std::int64_t k, double bias_magnitude, bool bf16_output) {
  const double u = 0x1p-24, n = static_cast<double>(k + 2);
  const double fp32 = n * u / (1.0 - n * u) * (o.abs_terms + o.grid_slack + bias_magnitude) + 0x1p-149 * n +
                      o.grid_slack;
  if (!bf16_output) return fp32;
  const double magnitude = std::fabs(o.y) + fp32;
  const double half_ulp = magnitude > 0 ? std::ldexp(1.0, std::ilogb(magnitude) - 8) : 0.0;
  return fp32 + std::max(half_ulp, 0x1p-134);
}

double weight_value(const Fp4Weight& w, std::int64_t n, std::int64_t k) {
  const double gs = w.format == WeightFormat::nvfp4 ? static_cast<double>(w.global_scale) : 1.0;
  return block_scaled_weight(w, n, k) * gs;
}

double QuantizedActivations::value(std::int64_t i, std::int64_t j) const {
  const std::int64_t block = block_size(format);
  const double e2m1 = e2m1_decode(code_at(packed, k / 2, i, j));
  return e2m1 * scale_value(format, scales[static_cast<std::size_t>(i * (k / block) + j / block)]);
}

QuantizedActivations quantize_activations(WeightFormat format, const std::uint16_t* x_bf16, std::int64_t m,
                                          std::int64_t k, float gs) {
  const std::int64_t block = block_size(format);
  QuantizedActivations q;
  q.format = format;
  q.m = m;
  q.k = k;
  q.packed.assign(static_cast<std::size_t>(m * k / 2), 0);
  q.scales.assign(static_cast<std::size_t>(m * (k / block)), 0);
  std::vector<float> v(static_cast<std::size_t>(block));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t b = 0; b < k / block; ++b) {
      float amax = 0.0f;
      for (std::int64_t e = 0; e < block; ++e) {
        v[static_cast<std::size_t>(e)] = bf16_to_float(x_bf16[i * k + b * block + e]);
        amax = fp4cl_amax_step(amax, v[static_cast<std::size_t>(e)]);
      }
      std::uint32_t sf = 0;
      float mult = 0.0f;
      if (format == WeightFormat::nvfp4) {
        sf = nvfp4_scale_byte(amax, gs);
        mult = nvfp4_multiplier(sf, gs);
      } else {
        sf = mxfp4_scale_byte(amax);
        mult = mxfp4_multiplier(sf);
      }
      q.scales[static_cast<std::size_t>(i * (k / block) + b)] = static_cast<std::uint8_t>(sf);
      for (std::int64_t e = 0; e < block; ++e) {
        const std::uint32_t code = fp4_encode_scaled(v[static_cast<std::size_t>(e)], mult);
        const std::int64_t j = b * block + e;
        std::uint8_t& byte = q.packed[static_cast<std::size_t>(i * (k / 2) + j / 2)];
        byte = static_cast<std::uint8_t>(byte | (j % 2 == 0 ? code : code << 4));
      }
    }
  }
  return q;
}

LinearReference::LinearReference(const QuantScheme& scheme, const Fp4Weight& w, const std::uint16_t* x_bf16,
                                 std::int64_t m, std::vector<float> bias)
    : w_(w), m_(m), bias_(std::move(bias)) {
  const std::int64_t k = w.k;
  const bool nv = w.format == WeightFormat::nvfp4;
  a_.resize(static_cast<std::size_t>(m * k));
  if (scheme.w4a16()) {
    for (std::int64_t i = 0; i < m * k; ++i) a_[static_cast<std::size_t>(i)] = bf16_to_float(x_bf16[i]);
    alpha_ = nv ? static_cast<double>(w.global_scale) : 1.0;
    const std::vector<std::uint16_t> grid = w4a16_int_grid(x_bf16, m * k);
    grid_error_.resize(static_cast<std::size_t>(m * k));
    for (std::int64_t i = 0; i < m * k; ++i) {
      const double d = std::fabs(static_cast<double>(bf16_to_float(grid[static_cast<std::size_t>(i)])) -
                                 a_[static_cast<std::size_t>(i)]);
      grid_error_[static_cast<std::size_t>(i)] = std::isnan(d) ? 0.0 : d;  // non-finite chunks are not rounded
    }
  } else {
    const QuantizedActivations q = quantize_activations(w.format, x_bf16, m, k, w.input_global_scale);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k; ++j) a_[static_cast<std::size_t>(i * k + j)] = q.value(i, j);
    alpha_ = nv ? static_cast<double>(w.input_scale * w.global_scale) : 1.0;  // the fp32 product, as the layer
  }
}

void LinearReference::decode_row(std::int64_t row, std::vector<double>& out) const {
  out.resize(static_cast<std::size_t>(w_.k));
  for (std::int64_t j = 0; j < w_.k; ++j) out[static_cast<std::size_t>(j)] = block_scaled_weight(w_, row, j);
}

LinearOutput LinearReference::dot(const std::vector<double>& w_row, std::int64_t token, std::int64_t row) const {
  const double* a = a_.data() + token * w_.k;
  double sum = 0.0, abs_sum = 0.0, slack = 0.0;
  for (std::int64_t j = 0; j < w_.k; ++j) {
    const double t = a[j] * w_row[static_cast<std::size_t>(j)];
    sum += t;
    abs_sum += std::fabs(t);
  }
  if (!grid_error_.empty()) {
    const double* d = grid_error_.data() + token * w_.k;
    for (std::int64_t j = 0; j < w_.k; ++j) slack += d[j] * std::fabs(w_row[static_cast<std::size_t>(j)]);
  }
  LinearOutput o;
  o.y = alpha_ * sum + (bias_.empty() ? 0.0 : static_cast<double>(bias_[static_cast<std::size_t>(row)]));
  o.abs_terms = std::fabs(alpha_) * abs_sum;
  o.grid_slack = std::fabs(alpha_) * slack;
  return o;
}

LinearOutput LinearReference::at(std::int64_t token, std::int64_t row) const {
  std::vector<double> w_row;
  decode_row(row, w_row);
  return dot(w_row, token, row);
}

std::vector<LinearOutput> LinearReference::all() const {
  std::vector<LinearOutput> out(static_cast<std::size_t>(m_ * w_.n));
  std::vector<double> w_row;
  for (std::int64_t row = 0; row < w_.n; ++row) {
    decode_row(row, w_row);
    for (std::int64_t i = 0; i < m_; ++i) out[static_cast<std::size_t>(i * w_.n + row)] = dot(w_row, i, row);
  }
  return out;
}

}  // namespace fp4cl::reference
