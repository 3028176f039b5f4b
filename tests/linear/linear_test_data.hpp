// Test data and error bounds for the FP4 linear tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/formats.cl"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"
#include "reference/linear_reference.hpp"

namespace fp4cl::test {

// A random FP4 weight: every code byte (so ±0, both nibbles, all 16 codes), block scales over a
// realistic range plus some zero and (NVFP4) subnormal and negative E4M3 scales, realistic global
// scales.
inline Fp4Weight random_weight(WeightFormat format, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Fp4Weight w;
  w.format = format;
  w.n = n;
  w.k = k;
  const std::int64_t block = block_size(format);
  w.packed.resize(static_cast<std::size_t>(n * k / 2));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w.packed) b = static_cast<std::uint8_t>(byte(rng));
  w.scales.resize(static_cast<std::size_t>(n * (k / block)));
  std::uniform_int_distribution<int> pick(0, 99);
  for (auto& s : w.scales) {
    const int p = pick(rng);
    if (format == WeightFormat::nvfp4) {
      // 2^-6 .. 30 (bytes 0x08..0x5F), 3 % subnormal (0x01..0x07), 1 % zero, 2 % negative
      // (sign bit set: valid E4M3, though producers write none).
      if (p == 0) s = 0;
      else if (p < 4) s = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(1, 7)(rng));
      else s = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0x08, 0x5F)(rng));
      if (p >= 98) s = static_cast<std::uint8_t>(s | 0x80);
    } else {
      s = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(118, 130)(rng));  // 2^-9 .. 2^3
    }
  }
  if (format == WeightFormat::nvfp4) {
    w.global_scale = std::uniform_real_distribution<float>(1e-4f, 1e-2f)(rng);
    w.set_input_scales_from_quant(std::uniform_real_distribution<float>(50.0f, 1000.0f)(rng));
  }
  return w;
}

// Random BF16 activations: normal with a few outliers, some exact zeros and an all-zero block.
inline std::vector<std::uint16_t> random_activations(std::int64_t m, std::int64_t k, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
  for (auto& v : x) {
    const int p = pick(rng);
    float f = normal(rng);
    if (p < 10) f *= 30.0f;
    if (p >= 990) f = 0.0f;
    v = static_cast<std::uint16_t>(float_to_bf16(f));
  }
  if (m > 0 && k >= 32)
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = 0;  // first block(s) of token 0: zero
  return x;
}

inline float bf16_value(std::uint16_t b) { return bf16_to_float(b); }

// The largest |y - ref| a correct kernel can produce for one output.
//
// The products a·w are exact in fp32 (fp4_dot.cl: a decoded weight has at most 6 significant bits,
// a BF16 activation 8, a W4A4 activation times its E4M3 scale 6), so the only fp32 roundings are
// the k - 1 additions of the sum (in whatever order the kernel adds), the epilogue's multiply by
// alpha (and alpha's own rounding) and the bias addition: k + 2 roundings of quantities bounded by
// Σ|terms| + |bias|, hence the classic bound γ·(Σ|terms| + |bias|) with γ = (k+2)·u/(1-(k+2)·u),
// u = 2^-24. A BF16 output is then rounded once more, to nearest: at most half an ulp of the fp32
// value, i.e. 2^(e-8) for |value| in [2^e, 2^(e+1)), bounded using |ref| + the fp32 error.
inline double error_bound(const reference::LinearOutput& ref, double bias_magnitude, std::int64_t k, bool bf16_out) {
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(k + 2);
  const double gamma = n * u / (1.0 - n * u);
  // Under W4A16, gemv_int's activations on their integer grid: at most grid_slack more (and terms
  // larger by as much; linear_reference.hpp).
  const double fp32 = gamma * (ref.abs_terms + ref.grid_slack + bias_magnitude) + std::ldexp(1.0, -149) * n +
                      ref.grid_slack;
  if (!bf16_out) return fp32;
  const double mag = std::fabs(ref.y) + fp32;
  const double half_ulp = mag > 0 ? std::ldexp(1.0, std::ilogb(mag) - 8) : 0.0;
  return fp32 + std::max(half_ulp, std::ldexp(1.0, -134));
}

}  // namespace fp4cl::test
