// Random numbers that are the same on every platform, compiler and standard library: the
// synthetic model generator and the quantizer's calibration activations are specified by them, so
// that a seed names the same bytes everywhere (std::normal_distribution and std::log differ
// between standard libraries; these use only IEEE-754 +, -, ×, ÷, sqrt and exact bit operations,
// each correctly rounded, in a fixed order).
//
//  - SplitMix64 (Steele, Lea, Flood 2014; Vigna's reference splitmix64.c) expands a 64-bit seed.
//  - xoshiro256** 1.0 (Blackman, Vigna 2018; reference xoshiro256starstar.c) is the stream.
//  - uniform(): the top 53 bits of a draw × 2^-53, in [0, 1).
//  - normal(): Marsaglia's polar method, with portable_log() (checkpoint/portable_math.hpp).
//
// tests/checkpoint_write/synthetic_interop.py re-implements all of it in Python and reproduces
// generated tensors bit for bit.
#pragma once

#include <cstdint>
#include <string_view>

#include "checkpoint/portable_math.hpp"

namespace fp4cl::detail {

// One SplitMix64 step: advances `state` and returns the next output.
std::uint64_t splitmix64_next(std::uint64_t& state);

// 64-bit FNV-1a of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
std::uint64_t fnv1a64(std::string_view bytes);

class PortableRandom {
 public:
  // The four state words are four SplitMix64 outputs starting from `seed`.
  explicit PortableRandom(std::uint64_t seed);
  // A stream for one named purpose: seeded with seed XOR fnv1a64(name), so every tensor of a
  // synthetic model has its own stream that does not depend on the others' sizes.
  PortableRandom(std::uint64_t seed, std::string_view name) : PortableRandom(seed ^ fnv1a64(name)) {}
  // A generator with the given xoshiro256** state (not all zero), for the reference test vectors.
  static PortableRandom with_state(std::uint64_t s0, std::uint64_t s1, std::uint64_t s2, std::uint64_t s3);

  // The next xoshiro256** output.
  std::uint64_t next();
  // (next() >> 11) × 2^-53: uniform in [0, 1).
  double uniform();
  // A standard normal deviate (polar method: u, v = 2·uniform() - 1 until 0 < s = u² + v² < 1,
  // then u·√(-2 ln s / s) and, on the following call, v·√(-2 ln s / s)).
  double normal();

 private:
  PortableRandom() = default;
  std::uint64_t s_[4] = {};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace fp4cl::detail
