#include "synthetic_data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "common/formats.cl"

namespace fp4cl::bench {

namespace {

void fill_bytes(std::vector<std::uint8_t>& v, std::size_t n, std::mt19937_64& rng) {
  v.resize(n);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t r = rng();
    for (std::size_t j = i; j < std::min(n, i + 8); ++j, r >>= 8) v[j] = static_cast<std::uint8_t>(r);
  }
}

// NVFP4: E4M3 scales in [2^-3, 2^3]; MXFP4: E8M0 exponents in [-4, 0] around 2^-(log2 sqrt(k)).
void fill_scales(std::vector<std::uint8_t>& s, std::size_t n, WeightFormat f, std::int64_t k, std::mt19937_64& rng) {
  s.resize(n);
  const int center = static_cast<int>(std::lround(std::log2(std::sqrt(static_cast<double>(k)))));
  std::uniform_int_distribution<int> nv(0x20, 0x50), mx(127 - center - 4, 127 - center);
  for (auto& b : s) b = static_cast<std::uint8_t>(f == WeightFormat::nvfp4 ? nv(rng) : mx(rng));
}

// The dequant global scale that keeps a k-term dot product of unit activations near unit size.
float global_scale(std::int64_t k) { return 1.0f / (4.0f * std::sqrt(static_cast<float>(k))); }

}  // namespace

Fp4Weight make_linear_weight(WeightFormat format, std::int64_t n, std::int64_t k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp4Weight w;
  w.format = format;
  w.n = n;
  w.k = k;
  fill_bytes(w.packed, static_cast<std::size_t>(n * k / 2), rng);
  fill_scales(w.scales, static_cast<std::size_t>(n * (k / block_size(format))), format, k, rng);
  if (format == WeightFormat::nvfp4) {
    w.global_scale = global_scale(k);
    w.set_input_scales_from_quant(448.0f * 6.0f / 4.0f);  // activations up to about 4
  }
  return w;
}

Fp4Experts make_experts(WeightFormat format, std::int64_t hidden, std::int64_t intermediate, std::int64_t experts,
                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp4Experts ex;
  ex.format = format;
  ex.num_experts = experts;
  ex.hidden = hidden;
  ex.intermediate = intermediate;
  const auto E = static_cast<std::size_t>(experts), H = static_cast<std::size_t>(hidden),
             I = static_cast<std::size_t>(intermediate), B = static_cast<std::size_t>(block_size(format));
  fill_bytes(ex.w13_packed, E * 2 * I * H / 2, rng);
  fill_bytes(ex.w2_packed, E * H * I / 2, rng);
  fill_scales(ex.w13_scales, E * 2 * I * H / B, format, hidden, rng);
  fill_scales(ex.w2_scales, E * H * I / B, format, intermediate, rng);
  const bool nv = format == WeightFormat::nvfp4;
  ex.w13_global_scale.assign(2 * E, nv ? global_scale(hidden) : 1.0f);
  ex.w2_global_scale.assign(E, nv ? global_scale(intermediate) : 1.0f);
  if (nv) {
    ex.set_input_scales_from_quant(std::vector<float>(E, 448.0f * 6.0f / 4.0f),
                                   std::vector<float>(E, 448.0f * 6.0f / 4.0f));
  }
  return ex;
}

void add_expert_biases(Fp4Experts& ex, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  ex.w13_bias.resize(static_cast<std::size_t>(ex.num_experts * 2 * ex.intermediate));
  ex.w2_bias.resize(static_cast<std::size_t>(ex.num_experts * ex.hidden));
  for (float& b : ex.w13_bias) b = u(rng);
  for (float& b : ex.w2_bias) b = u(rng);
}

std::vector<std::uint16_t> make_activations(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * cols));
  for (auto& v : x) v = static_cast<std::uint16_t>(float_to_bf16(normal(rng)));
  return x;
}

Routing make_routing(std::int64_t tokens, int top_k, std::int64_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  Routing r;
  std::vector<std::int32_t> all(static_cast<std::size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    // The first k of a partial Fisher-Yates shuffle: k distinct experts.
    for (int s = 0; s < top_k; ++s) {
      std::uniform_int_distribution<std::int64_t> pick(s, experts - 1);
      std::swap(all[static_cast<std::size_t>(s)], all[static_cast<std::size_t>(pick(rng))]);
      r.ids.push_back(all[static_cast<std::size_t>(s)]);
    }
    float sum = 0.0f;
    std::vector<float> w(static_cast<std::size_t>(top_k));
    for (float& v : w) sum += (v = u(rng));
    for (float v : w) r.weights.push_back(v / sum);
  }
  return r;
}

std::vector<float> make_logits(std::int64_t tokens, std::int64_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<std::size_t>(tokens * experts));
  for (float& v : l) v = d(rng);
  return l;
}

std::int64_t distinct_experts(const Routing& r) {
  return static_cast<std::int64_t>(std::set<std::int32_t>(r.ids.begin(), r.ids.end()).size());
}

}  // namespace fp4cl::bench
