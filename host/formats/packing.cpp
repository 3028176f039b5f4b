// Two E2M1 codes per byte, element 2i in the low nibble (FP4.md §2).
#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl {

std::vector<std::uint8_t> pack_fp4(const std::vector<std::uint8_t>& codes) {
  if (codes.size() % 2 != 0) fail("pack_fp4: codes has {} elements; an even count is needed", codes.size());
  std::vector<std::uint8_t> packed(codes.size() / 2);
  for (std::size_t i = 0; i < packed.size(); ++i) {
    const std::uint8_t lo = codes[2 * i], hi = codes[2 * i + 1];
    if ((lo | hi) > 15) fail("pack_fp4: codes[{}] = {} is not a 4-bit code", lo > 15 ? 2 * i : 2 * i + 1, lo > 15 ? lo : hi);
    packed[i] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  return packed;
}

std::vector<std::uint8_t> unpack_fp4(const std::vector<std::uint8_t>& packed) {
  std::vector<std::uint8_t> codes(packed.size() * 2);
  for (std::size_t i = 0; i < packed.size(); ++i) {
    codes[2 * i] = packed[i] & 0xF;
    codes[2 * i + 1] = packed[i] >> 4;
  }
  return codes;
}

}  // namespace fp4cl
