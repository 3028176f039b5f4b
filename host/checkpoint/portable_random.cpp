#include "checkpoint/portable_random.hpp"

#include <cmath>

#include "support/check.hpp"

namespace fp4cl::detail {

std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

PortableRandom::PortableRandom(std::uint64_t seed) {
  std::uint64_t state = seed;
  for (std::uint64_t& word : s_) word = splitmix64_next(state);
}

PortableRandom PortableRandom::with_state(std::uint64_t s0, std::uint64_t s1, std::uint64_t s2,
                                          std::uint64_t s3) {
  if ((s0 | s1 | s2 | s3) == 0) fail("xoshiro256** state must not be all zero");
  PortableRandom r;
  r.s_[0] = s0;
  r.s_[1] = s1;
  r.s_[2] = s2;
  r.s_[3] = s3;
  return r;
}

std::uint64_t PortableRandom::next() {
  auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double PortableRandom::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double PortableRandom::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  for (;;) {
    const double u = 2.0 * uniform() - 1.0;
    const double v = 2.0 * uniform() - 1.0;
    const double uu = u * u;
    const double vv = v * v;
    const double s = uu + vv;
    if (s >= 1.0 || s == 0.0) continue;
    const double minus_two_log = -2.0 * portable_log(s);
    const double f = std::sqrt(minus_two_log / s);  // sqrt is correctly rounded (IEEE-754)
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }
}

}  // namespace fp4cl::detail
