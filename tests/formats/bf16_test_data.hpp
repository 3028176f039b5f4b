// BF16 test matrices for the quantization tests: seeded random data, and adversarial blocks
// (zero blocks, BF16 extremes, ±Inf, NaN, subnormals, E2M1 and E4M3 rounding ties after
// scaling, negative zeros). Deterministic for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fp4cl/formats.hpp"

namespace fp4cl::test {

inline std::uint16_t bf16(float x) { return float_to_bf16(x); }

// Gaussian values whose magnitude changes from row to row (10^-3 .. 10^3).
inline std::vector<std::uint16_t> random_bf16(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float sigma = std::pow(10.0f, exponent(rng));
    for (std::int64_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * cols + c)] = bf16(sigma * normal(rng));
  }
  return out;
}

// Uniformly random 16-bit patterns: every BF16 class (NaN and ±Inf included).
inline std::vector<std::uint16_t> random_bits(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
  for (auto& v : out) v = static_cast<std::uint16_t>(rng() >> 16);
  return out;
}

// Each block of `block` elements is one of several adversarial kinds, chosen by the block's index.
inline std::vector<std::uint16_t> adversarial_bf16(std::int64_t rows, std::int64_t cols, int block,
                                                    std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 1 << 30);
  auto signed_ = [&](float v) { return (pick(rng) & 1) ? -v : v; };
  // The E2M1 rounding ties and the values next to them, relative to a block maximum of 6.
  static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f,
                               2.0f,  3.0f,  4.0f,  6.0f,  0.0f, 0.24f, 0.26f, 5.01f, 4.99f};
  std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
  const std::int64_t blocks = rows * cols / block;
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint16_t* x = &out[static_cast<std::size_t>(b * block)];
    const int kind = static_cast<int>((b + seed) % 10);
    // A power-of-two block scale 2^p: with a block maximum of 6·2^p both recipes multiply by
    // exactly 2^-p (for NVFP4 when gs·2^p is an E4M3 value), so ties stay ties after scaling.
    const float p2 = std::ldexp(1.0f, pick(rng) % 40 - 20);
    // Two neighbouring normal E4M3 values, for a block maximum at their midpoint (×6).
    const auto e4m3_byte = static_cast<std::uint8_t>(8 + pick(rng) % 110);
    const float lo = e4m3_to_float(e4m3_byte), hi = e4m3_to_float(static_cast<std::uint8_t>(e4m3_byte + 1));
    for (int i = 0; i < block; ++i) {
      switch (kind) {
        case 0: x[i] = 0; break;                                    // all-zero block
        case 1: x[i] = static_cast<std::uint16_t>((i % 2) ? 0x8000 : 0); break;                // ±0
        case 2: x[i] = bf16(signed_(p2 * ties[static_cast<std::size_t>(pick(rng)) % 19])); break;
        case 3: x[i] = static_cast<std::uint16_t>((pick(rng) & 0x807F) | (pick(rng) % 3 == 0 ? 0 : 1));  // subnormals
                break;
        case 4: x[i] = static_cast<std::uint16_t>((pick(rng) & 1) ? 0x7F7F : 0xFF7F); break;   // ±BF16 max
        case 5: x[i] = bf16(signed_(std::ldexp(1.0f + static_cast<float>(pick(rng) % 128) / 128.0f, pick(rng) % 254 - 126)));
                break;                                              // any magnitude
        case 6: x[i] = i == 3 ? std::uint16_t{0x7F80} : (i == 9 ? std::uint16_t{0xFF80} : bf16(signed_(1.0f + static_cast<float>(i)))); break;  // ±Inf
        case 7: x[i] = i == 5 ? std::uint16_t{0x7FC0} : bf16(signed_(static_cast<float>(i) * 0.37f)); break;  // a NaN element
        case 8:  // the block maximum at an E4M3 rounding tie (for gs = 1)
          x[i] = i == 0 ? bf16(6.0f * (lo + hi) / 2) : bf16(signed_(lo * static_cast<float>(i % 7)));
          break;
        default: x[i] = bf16(signed_(6.0f * p2 * static_cast<float>(i) / static_cast<float>(block))); break;
      }
    }
    if (kind == 2) x[pick(rng) % block] = bf16(6.0f * p2);  // pin the block maximum to 6·2^p
  }
  return out;
}

}  // namespace fp4cl::test
