// The safetensors dtype table: names, element sizes, and checked tensor byte lengths.
#include <array>
#include <string>

#include "checkpoint/tensor_bytes.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  int bits;
};

// In enum order (checked by the static_assert below).
constexpr std::array<DtypeEntry, 22> kDtypes = {{
    {Dtype::boolean, "BOOL", 8},
    {Dtype::f4, "F4", 4},
    {Dtype::f6_e2m3, "F6_E2M3", 6},
    {Dtype::f6_e3m2, "F6_E3M2", 6},
    {Dtype::u8, "U8", 8},
    {Dtype::i8, "I8", 8},
    {Dtype::f8_e5m2, "F8_E5M2", 8},
    {Dtype::f8_e4m3, "F8_E4M3", 8},
    {Dtype::f8_e8m0, "F8_E8M0", 8},
    {Dtype::f8_e4m3fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::f8_e5m2fnuz, "F8_E5M2FNUZ", 8},
    {Dtype::i16, "I16", 16},
    {Dtype::u16, "U16", 16},
    {Dtype::f16, "F16", 16},
    {Dtype::bf16, "BF16", 16},
    {Dtype::i32, "I32", 32},
    {Dtype::u32, "U32", 32},
    {Dtype::f32, "F32", 32},
    {Dtype::c64, "C64", 64},
    {Dtype::f64, "F64", 64},
    {Dtype::i64, "I64", 64},
    {Dtype::u64, "U64", 64},
}};

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kDtypes.size(); ++i) {
    if (static_cast<std::size_t>(kDtypes[i].dtype) != i) return false;
  }
  return static_cast<std::size_t>(Dtype::u64) + 1 == kDtypes.size();
}
static_assert(table_in_enum_order(), "kDtypes must list every Dtype in enum order");

const DtypeEntry& entry(Dtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::string_view dtype_name(Dtype dtype) { return entry(dtype).name; }

int dtype_bits(Dtype dtype) { return entry(dtype).bits; }

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

TensorBytes tensor_bytes(Dtype dtype, const std::vector<std::int64_t>& shape) {
  TensorBytes result;
  std::uint64_t elements = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      result.status = TensorBytes::Status::negative_dimension;
      result.bad_dim = i;
      return result;
    }
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(shape[i]), &elements)) {
      result.status = TensorBytes::Status::overflow;
      return result;
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits)) {
    result.status = TensorBytes::Status::overflow;
    return result;
  }
  result.elements = elements;
  if (bits % 8 != 0) {
    result.status = TensorBytes::Status::partial_byte;
    return result;
  }
  result.bytes = bits / 8;
  return result;
}

std::uint64_t TensorInfo::num_elements() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);  // validated on load: no overflow
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace fp4cl
