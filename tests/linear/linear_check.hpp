// Runs a Linear layer on host data and compares it with the scalar reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/linear.hpp"
#include "linear/linear_test_data.hpp"
#include "reference/linear_reference.hpp"

namespace fp4cl::test {

struct CheckStats {
  std::size_t checked = 0;
  double worst_ratio = 0.0;      // max |y - ref| / error_bound
  double worst_relative = 0.0;   // max |y - ref| / Σ|terms| (fp32 output)
};

// The outputs to check: all of them for small layers, else a sample that includes the first and
// last token and row (tile edges) and random ones.
inline std::vector<std::pair<std::int64_t, std::int64_t>> outputs_to_check(std::int64_t m, std::int64_t n,
                                                                           std::int64_t k, std::uint32_t seed) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (m * n * k <= 40'000'000) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t r = 0; r < n; ++r) out.emplace_back(i, r);
    return out;
  }
  for (std::int64_t i : {std::int64_t{0}, m - 1})
    for (std::int64_t r : {std::int64_t{0}, std::int64_t{1}, n - 1}) out.emplace_back(i, r);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> token(0, m - 1), row(0, n - 1);
  const std::int64_t samples = std::max<std::int64_t>(200, 40'000'000 / (k * 8));
  for (std::int64_t s = 0; s < samples; ++s) out.emplace_back(token(rng), row(rng));
  return out;
}

// y: the layer's outputs as doubles ([m, n]). Checks each sampled output against the bound.
inline CheckStats check_against_reference(const QuantScheme& scheme, const Fp4Weight& w,
                                          const std::vector<std::uint16_t>& x, std::int64_t m,
                                          const std::vector<float>& bias, const std::vector<double>& y,
                                          bool bf16_out, const std::string& what) {
  const reference::LinearReference ref(scheme, w, x.data(), m, bias);
  CheckStats stats;
  int failures = 0;
  for (const auto& [i, r] : outputs_to_check(m, w.n, w.k, static_cast<std::uint32_t>(m * 31 + w.n))) {
    const reference::LinearOutput o = ref.at(i, r);
    const double got = y[static_cast<std::size_t>(i * w.n + r)];
    const double b = bias.empty() ? 0.0 : std::fabs(static_cast<double>(bias[static_cast<std::size_t>(r)]));
    const double bound = error_bound(o, b, w.k, bf16_out);
    const double err = std::fabs(got - o.y);
    ++stats.checked;
    if (bound > 0) stats.worst_ratio = std::max(stats.worst_ratio, err / bound);
    if (!bf16_out && o.abs_terms > 0) stats.worst_relative = std::max(stats.worst_relative, err / o.abs_terms);
    const bool ok = (std::isnan(o.y) && std::isnan(got)) || err <= bound;
    if (!ok && ++failures <= 5)
      ADD_FAILURE() << what << ": y[" << i << ", " << r << "] = " << got << ", reference " << o.y << " (|error| "
                    << err << " > bound " << bound << ", sum of |terms| " << o.abs_terms << ")";
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << stats.checked << " outputs out of bounds";
  return stats;
}

inline std::vector<double> as_doubles(const std::vector<std::uint16_t>& bf16) {
  std::vector<double> out(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_value(bf16[i]);
  return out;
}
inline std::vector<double> as_doubles(const std::vector<float>& f) { return {f.begin(), f.end()}; }

}  // namespace fp4cl::test
