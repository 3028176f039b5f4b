// Helpers for the checkpoint-writer tests: file bytes, small models, and the FP4 error bound.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/formats.hpp"
#include "fp4cl/model_writer.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl::test {

inline std::vector<std::uint8_t> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every regular file of a directory: name → bytes.
inline std::map<std::string, std::vector<std::uint8_t>> directory_bytes(const std::filesystem::path& dir) {
  std::map<std::string, std::vector<std::uint8_t>> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) files[entry.path().filename().string()] = file_bytes(entry.path());
  }
  return files;
}

// Entries of `dir` whose name starts with '.' (staging leftovers).
inline std::vector<std::string> hidden_entries(const std::filesystem::path& dir) {
  std::vector<std::string> hidden;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name[0] == '.') hidden.push_back(name);
  }
  return hidden;
}

// A model small enough for fast tests whose every in_features (64, 32) is a multiple of 32.
inline SyntheticModelOptions tiny_model(std::uint64_t seed = 11) {
  SyntheticModelOptions o;
  o.seed = seed;
  o.layers = 2;
  o.hidden = 64;
  o.intermediate = 32;
  o.experts = 4;
  o.experts_per_token = 2;
  o.heads = 2;
  o.kv_heads = 1;
  o.head_dim = 32;
  o.vocab = 64;
  return o;
}

// A tensor's values as floats (BF16 or F32).
inline std::vector<float> float_values(const TensorView& t) {
  std::vector<float> v;
  if (t.dtype() == Dtype::bf16) {
    for (const std::uint16_t b : t.to_vector<std::uint16_t>(Dtype::bf16)) v.push_back(bf16_to_float(b));
  } else {
    v = t.to_vector<float>();
  }
  return v;
}

// The FP4 error bound for element x of a block whose effective scale is s (the E4M3 or E8M0 block
// scale times the dequant-direction global scale), and w its dequantized value:
//   |x - w| ≤ s·h(|x|/s) + 2^-20·|x|,  h(t) = 0.25 for t < 2, 0.5 for t < 4, 1 otherwise.
// Within [0, 6] the elements are round-to-nearest on the E2M1 grid (steps 0.5 / 1 / 2 on
// [0,2] / [2,4] / [4,6]): the error is at most half the step of the interval holding t = |x|/s.
// Above 6 the element saturates at 6, an error of t - 6; the block-scale rules keep t below 7, so
// h's 1 covers it: NVFP4 rounds the ideal scale amax_b·gs/6 to E4M3 with relative error ≤ 2^-4
// (3 mantissa bits, normal range), so t ≤ 6/(1 - 2^-4) = 6.4; compressed-tensors' MXFP4 weight
// rule gives t < 7 (FP4 weight_quantizer.hpp). The 2^-20·|x| term covers fp32 rounding of the
// multiplier 1/(sf·gs_d) and of the two products of the dequantization (a few ulp, 2^-24 each).
// A zero NVFP4 block scale (ideal scale ≤ 2^-10, half E4M3's smallest subnormal) quantizes the
// block to zeros: then |x| ≤ 6·2^-10·gs_d.
inline double fp4_error_bound(double x, double s, double zero_scale_limit) {
  const double a = std::fabs(x);
  if (s == 0.0) return zero_scale_limit;
  const double t = a / s;
  const double h = t < 2.0 ? 0.25 : t < 4.0 ? 0.5 : 1.0;
  return s * h + std::ldexp(a, -20);
}

// Checks every element of a dequantized weight against its source and that the scales are tight
// (the largest element of every non-zero block encodes to magnitude ≥ 4). `gs_d` is the
// dequant-direction global scale (1 for MXFP4). Returns the number of failures (reported through
// gtest, at most a few).
inline int expect_within_fp4_error(const std::string& what, const std::vector<float>& source,
                                   const QuantizedRows& q, float gs_d) {
  const std::vector<float> deq = dequantize(q);
  const int block = q.block_size();
  int failures = 0;
  for (std::int64_t b = 0; b < q.rows * q.scale_cols(); ++b) {
    const std::uint8_t byte = q.scales[static_cast<std::size_t>(b)];
    const double sf = q.format == WeightFormat::nvfp4 ? e4m3_to_float(byte) : e8m0_to_float(byte);
    const double s = sf * gs_d;
    float block_amax = 0.0f, code_max = 0.0f;
    for (int i = 0; i < block; ++i) {
      const std::size_t k = static_cast<std::size_t>(b * block + i);
      block_amax = std::max(block_amax, std::fabs(source[k]));
      code_max = std::max(code_max, std::fabs(e2m1_to_float(fp4_code_at(q.packed.data(), b * block + i))));
      const double bound = fp4_error_bound(source[k], s, 6.0 * std::ldexp(1.0, -10) * gs_d);
      const double err = std::fabs(static_cast<double>(source[k]) - static_cast<double>(deq[k]));
      if (!(err <= bound)) {
        if (++failures <= 3) {
          ADD_FAILURE() << what << " element " << k << ": source " << source[k] << ", dequantized " << deq[k]
                        << ", error " << err << " > bound " << bound << " (block scale " << s << ")";
        }
      }
    }
    if (block_amax > 0.0f && s > 0.0 && code_max < 4.0f) {
      if (++failures <= 3) {
        ADD_FAILURE() << what << " block " << b << ": amax " << block_amax << " encodes to at most "
                      << code_max << " (scale " << s << " is not tight)";
      }
    }
  }
  return failures;
}

}  // namespace fp4cl::test
