// A 128-bit non-cryptographic hash (two independent 64-bit FNV-1a lanes) for cache keys.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fp4cl {

struct Hash128 {
  std::uint64_t a = 0xcbf29ce484222325ull;  // FNV offset basis
  std::uint64_t b = 0x84222325cbf29ce4ull;  // a second, different basis

  Hash128& update(std::string_view bytes) {
    for (unsigned char c : bytes) {
      a = (a ^ c) * 0x100000001b3ull;
      b = (b ^ c) * 0x100000001b3ull;
      b ^= b >> 29;
    }
    // Length framing so that ("ab","c") and ("a","bc") differ.
    const std::uint64_t n = bytes.size();
    for (int i = 0; i < 8; ++i) {
      a = (a ^ ((n >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    }
    return *this;
  }
  std::string hex() const;
};

inline std::string Hash128::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[static_cast<std::size_t>(15 - i)] = digits[(a >> (4 * i)) & 0xf];
    s[static_cast<std::size_t>(31 - i)] = digits[(b >> (4 * i)) & 0xf];
  }
  return s;
}

}  // namespace fp4cl
