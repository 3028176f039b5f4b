// A linear strategy forced on the test device and every output checked against the scalar
// reference: the harness of the per-strategy tests (linear_gemv_split_test, linear_mma_test).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp4cl/linear.hpp"
#include "linear/linear_check.hpp"
#include "linear/linear_test_support.hpp"

namespace fp4cl::test {

inline std::vector<float> random_bias(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> b(static_cast<std::size_t>(n));
  for (float& v : b) v = d(rng);
  return b;
}

// Every scheme: NVFP4 and MXFP4, W4A16 and W4A4.
inline const std::vector<QuantScheme>& all_linear_schemes() {
  static const std::vector<QuantScheme> schemes = {{WeightFormat::nvfp4, Activations::bf16},
                                                   {WeightFormat::nvfp4, Activations::fp4_dynamic},
                                                   {WeightFormat::mxfp4, Activations::bf16},
                                                   {WeightFormat::mxfp4, Activations::fp4_dynamic}};
  return schemes;
}

// Runs linear strategy `kernel`, forced, and checks every output against the reference (fp32
// outputs within 1e-5 relative); returns the outputs' bits (BF16 values, or fp32 bit patterns).
inline std::vector<std::uint32_t> run_forced_checked(const std::string& kernel, const QuantScheme& scheme,
                                                     const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                                     std::int64_t m, const std::vector<float>& bias, OutputType output,
                                                     const std::map<std::string, long long>& tuning,
                                                     const std::string& what) {
  LinearOptions options;
  options.kernel = kernel;
  options.output = output;
  options.max_tokens = m;
  options.bias = bias;
  options.tuning = tuning;
  Linear layer = Linear::create(context(), w, scheme, options);
  EXPECT_EQ(layer.kernel_name(m), kernel);
  std::vector<double> y;
  std::vector<std::uint32_t> bits;
  if (output == OutputType::bf16) {
    std::vector<std::uint16_t> out;
    layer.run(x, m, out);
    y = as_doubles(out);
    bits.assign(out.begin(), out.end());
  } else {
    std::vector<float> out;
    layer.run(x, m, out);
    y = as_doubles(out);
    for (float v : out) {
      std::uint32_t b = 0;
      std::memcpy(&b, &v, 4);
      bits.push_back(b);
    }
  }
  const CheckStats stats = check_against_reference(scheme, w, x, m, bias, y, output == OutputType::bf16, what);
  EXPECT_EQ(stats.checked, static_cast<std::size_t>(m * w.n)) << what;
  if (output == OutputType::fp32) {
    EXPECT_LE(stats.worst_relative, 1e-5) << what;
  }
  return bits;
}

}  // namespace fp4cl::test
