// Checking block-scale bytes before they reach a kernel.
#include "prepare/block_scales.hpp"

#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

// Why `byte` is not a usable scale of `format`, or nullptr when it is one.
const char* bad_scale(WeightFormat format, std::uint8_t byte) {
  if (format == WeightFormat::mxfp4) return byte == 0xFF ? "NaN (E8M0 0xFF)" : nullptr;
  if ((byte & 0x7F) == 0x7F) return "NaN (E4M3 0x7F/0xFF)";
  if ((byte & 0x80) != 0 && byte != 0x80) return "negative";
  return nullptr;
}

}  // namespace

void check_block_scales(const TensorView& scales, WeightFormat format) {
  const Span<const std::uint8_t> bytes = scales.bytes();
  const std::int64_t cols = scales.shape().size() == 2 ? scales.shape()[1] : 1;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (const char* why = bad_scale(format, bytes[i])) {
      const std::int64_t index = static_cast<std::int64_t>(i);
      fail("tensor '{}' in '{}': block scale [{}, {}] is 0x{:02X}, {}; expected a finite non-negative {} scale",
           scales.name(), scales.file(), index / cols, index % cols, bytes[i], why,
           format == WeightFormat::nvfp4 ? "E4M3" : "E8M0");
    }
  }
}

}  // namespace fp4cl::detail
