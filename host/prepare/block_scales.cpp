// Checking block-scale bytes before they reach a kernel.
#include "prepare/block_scales.hpp"

#include <fmt/ranges.h>

#include <vector>

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
  const std::vector<std::int64_t>& shape = scales.shape();
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (const char* why = bad_scale(format, bytes[i])) {
      // The byte's index over the tensor's shape: [row, block], or [expert, row, block] for
      // stacked experts.
      std::vector<std::int64_t> at(shape.size());
      std::int64_t rest = static_cast<std::int64_t>(i);
      for (std::size_t d = shape.size(); d-- > 0;) {
        at[d] = shape[d] > 0 ? rest % shape[d] : 0;
        rest = shape[d] > 0 ? rest / shape[d] : rest;
      }
      if (at.empty()) at.push_back(rest);
      fail("tensor '{}' in '{}': block scale [{}] is 0x{:02X}, {}; expected a finite non-negative {} scale",
           scales.name(), scales.file(), fmt::join(at, ", "), bytes[i], why,
           format == WeightFormat::nvfp4 ? "E4M3" : "E8M0");
    }
  }
}

}  // namespace fp4cl::detail
