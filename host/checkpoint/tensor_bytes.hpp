// The byte length of a tensor from its dtype and shape, computed without overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace fp4cl {

struct TensorBytes {
  enum class Status {
    ok,
    negative_dimension,  // shape[bad_dim] < 0
    overflow,            // the element count or the bit count exceeds 64 bits
    partial_byte,        // a sub-byte dtype whose elements do not fill whole bytes
  };
  Status status = Status::ok;
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  std::size_t bad_dim = 0;
};

TensorBytes tensor_bytes(Dtype dtype, const std::vector<std::int64_t>& shape);

}  // namespace fp4cl
