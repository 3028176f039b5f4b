// Reading a layer's inputs from a safetensors file for `fp4cl run`: each accessor names the file,
// the tensor and what was expected when the tensor is missing or has the wrong dtype or shape.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace fp4cl::cli {

class LayerInputs {
 public:
  explicit LayerInputs(const std::string& path);

  bool has(const std::string& name) const;
  // The shape of tensor `name`, or nothing when the file has no such tensor.
  std::optional<std::vector<std::int64_t>> shape(const std::string& name) const;
  // A 2-D tensor [rows, cols] (`rows` < 0: any number of rows, returned). `what` says what the
  // tensor is for in messages ("[T, in_features = 64] of model.layers.0.self_attn.q_proj").
  // BF16 activations as BF16 bits: BF16 as stored, F32 rounded to nearest even.
  std::vector<std::uint16_t> bf16_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                         const std::string& what);
  // fp32 values: F32 as stored, BF16 widened exactly.
  std::vector<float> f32_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                const std::string& what);
  // int32 ids: I32 as stored, I64 when every value fits.
  std::vector<std::int32_t> i32_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                       const std::string& what);

  // Tensors of the file no accessor has read, sorted.
  std::vector<std::string> unread() const;
  const std::string& path() const { return path_; }

 private:
  TensorView matrix(const std::string& name, std::int64_t& rows, std::int64_t cols, const std::string& what,
                    const std::string& dtypes);
  std::string path_;
  SafetensorsFile file_;
  std::set<std::string> read_;
};

}  // namespace fp4cl::cli
