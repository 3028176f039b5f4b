// Small helpers shared by the formats tests: float bit patterns.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fp4cl::test {

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float float_of_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Bitwise equality, any NaN equal to any NaN.
inline bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

}  // namespace fp4cl::test
