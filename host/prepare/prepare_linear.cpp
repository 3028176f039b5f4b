// Preparing one linear module's weight from its checkpoint tensors.
#include "prepare/prepare_linear.hpp"

#include <algorithm>

#include "prepare/block_scales.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

void copy_codes_and_scales(const QuantizedModule& module, std::uint8_t* packed, std::uint8_t* scales) {
  check_block_scales(module.weight_scale, module.scheme.weight);
  const Span<const std::uint8_t> codes = module.weight.bytes();
  const Span<const std::uint8_t> block_scales = module.weight_scale.bytes();
  const auto packed_bytes = static_cast<std::size_t>(module.n * module.k / 2);
  const auto scale_bytes = static_cast<std::size_t>(module.n * (module.k / module.scheme.block_size()));
  if (codes.size() != packed_bytes || block_scales.size() != scale_bytes) {
    fail("{}: tensors hold {} code and {} scale bytes, expected {} and {}", module.describe(), codes.size(),
         block_scales.size(), packed_bytes, scale_bytes);
  }
  std::copy(codes.begin(), codes.end(), packed);
  std::copy(block_scales.begin(), block_scales.end(), scales);
}

GlobalScale weight_global_scale(const QuantizedModule& module) {
  if (!module.weight_global_scale) return GlobalScale{};
  return read_global_scale(*module.weight_global_scale, module.direction);
}

GlobalScale input_global_scale(const QuantizedModule& module) {
  if (!module.input_global_scale) return GlobalScale{};
  return read_global_scale(*module.input_global_scale, module.direction);
}

Fp4Weight prepare_linear(const QuantizedModule& module) {
  Fp4Weight w;
  w.format = module.scheme.weight;
  w.n = module.n;
  w.k = module.k;
  w.packed.resize(static_cast<std::size_t>(module.n * module.k / 2));
  w.scales.resize(static_cast<std::size_t>(module.n * (module.k / module.scheme.block_size())));
  copy_codes_and_scales(module, w.packed.data(), w.scales.data());
  w.global_scale = weight_global_scale(module).dequant;
  const GlobalScale input = input_global_scale(module);
  w.input_global_scale = input.quant;
  w.input_scale = input.dequant;
  return w;
}

}  // namespace fp4cl::detail
