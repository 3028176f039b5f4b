// TensorView's checked accessors.
#include <cstdint>
#include <cstring>

#include "checkpoint/safetensors_storage.hpp"
#include "fp4cl/safetensors.hpp"
#include "support/check.hpp"

namespace fp4cl {

const std::string& TensorView::file() const { return storage_->path; }

const TensorView& TensorView::expect_dtype(Dtype dtype) const {
  if (info_->dtype != dtype) {
    fail("tensor '{}' in '{}': expected dtype {}, but it is {} {}", info_->name, storage_->path,
         dtype_name(dtype), dtype_name(info_->dtype), shape_string(info_->shape));
  }
  return *this;
}

const TensorView& TensorView::expect_shape(const std::vector<std::int64_t>& shape) const {
  if (info_->shape != shape) {
    fail("tensor '{}' in '{}': expected shape {}, but it is {} {}", info_->name, storage_->path,
         shape_string(shape), dtype_name(info_->dtype), shape_string(info_->shape));
  }
  return *this;
}

void TensorView::check_elements(Dtype dtype, std::size_t element_size, std::size_t alignment) const {
  expect_dtype(dtype);
  if (static_cast<std::size_t>(dtype_bits(dtype)) != 8 * element_size) {
    fail("tensor '{}' in '{}': {} elements have {} bits, not the {} bits of the requested type", info_->name,
         storage_->path, dtype_name(dtype), dtype_bits(dtype), 8 * element_size);
  }
  if (reinterpret_cast<std::uintptr_t>(data_) % alignment != 0) {
    fail(
        "tensor '{}' in '{}': data at file offset {} is not aligned to {} bytes (the file lacks the "
        "format's 8-byte padding); copy it with to_vector()",
        info_->name, storage_->path, storage_->header.data_offset + info_->begin, alignment);
  }
}

float TensorView::scalar_f32() const {
  const bool scalar_shape = info_->shape.empty() || (info_->shape.size() == 1 && info_->shape[0] == 1);
  if (info_->dtype != Dtype::f32 || !scalar_shape) {
    fail("tensor '{}' in '{}': expected an F32 scalar (shape [] or [1]), but it is {} {}", info_->name,
         storage_->path, dtype_name(info_->dtype), shape_string(info_->shape));
  }
  float value;
  std::memcpy(&value, data_, sizeof value);
  return value;
}

}  // namespace fp4cl
