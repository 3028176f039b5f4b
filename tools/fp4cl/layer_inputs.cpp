#include "layer_inputs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "fp4cl/formats.hpp"
#include "support/check.hpp"

namespace fp4cl::cli {

LayerInputs::LayerInputs(const std::string& path) : path_(path), file_(SafetensorsFile::open(path)) {}

bool LayerInputs::has(const std::string& name) const { return file_.contains(name); }

std::optional<std::vector<std::int64_t>> LayerInputs::shape(const std::string& name) const {
  const std::optional<TensorView> t = file_.find(name);
  if (!t) return std::nullopt;
  return t->shape();
}

TensorView LayerInputs::matrix(const std::string& name, std::int64_t& rows, std::int64_t cols, const std::string& what,
                               const std::string& dtypes) {
  const std::optional<TensorView> t = file_.find(name);
  if (!t) {
    std::vector<std::string> names;
    for (const TensorInfo& i : file_.tensors()) names.push_back(i.name);
    fail("{}: no tensor '{}' ({} {}); the file holds: {}", path_, name, dtypes, what,
         names.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(names, ", ")));
  }
  const std::vector<std::int64_t>& shape = t->shape();
  const std::string expected = rows < 0 ? fmt::format("[T, {}]", cols) : fmt::format("[{}, {}]", rows, cols);
  if (shape.size() != 2 || shape[1] != cols || (rows >= 0 && shape[0] != rows))
    fail("{}: tensor '{}' is {} {}; expected {} {} ({})", path_, name, dtype_name(t->dtype()), shape_string(shape),
         dtypes, expected, what);
  rows = shape[0];
  read_.insert(name);
  return *t;
}

std::vector<std::uint16_t> LayerInputs::bf16_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                                    const std::string& what) {
  const TensorView t = matrix(name, rows, cols, what, "BF16 or F32");
  if (t.dtype() == Dtype::bf16) return t.to_vector<std::uint16_t>(Dtype::bf16);
  if (t.dtype() == Dtype::f32) {
    std::vector<std::uint16_t> out;
    for (float v : t.to_vector<float>()) out.push_back(float_to_bf16(v));
    return out;
  }
  fail("{}: tensor '{}' is {}; expected BF16 or F32 ({})", path_, name, dtype_name(t.dtype()), what);
}

std::vector<float> LayerInputs::f32_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                           const std::string& what) {
  const TensorView t = matrix(name, rows, cols, what, "F32 or BF16");
  if (t.dtype() == Dtype::f32) return t.to_vector<float>();
  if (t.dtype() == Dtype::bf16) {
    std::vector<float> out;
    for (std::uint16_t b : t.to_vector<std::uint16_t>(Dtype::bf16)) out.push_back(bf16_to_float(b));
    return out;
  }
  fail("{}: tensor '{}' is {}; expected F32 or BF16 ({})", path_, name, dtype_name(t.dtype()), what);
}

std::vector<std::int32_t> LayerInputs::i32_matrix(const std::string& name, std::int64_t& rows, std::int64_t cols,
                                                  const std::string& what) {
  const TensorView t = matrix(name, rows, cols, what, "I32 or I64");
  if (t.dtype() == Dtype::i32) return t.to_vector<std::int32_t>();
  if (t.dtype() == Dtype::i64) {
    std::vector<std::int32_t> out;
    for (std::int64_t v : t.to_vector<std::int64_t>()) {
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
        fail("{}: tensor '{}' holds {}, outside the int32 range of expert ids", path_, name, v);
      out.push_back(static_cast<std::int32_t>(v));
    }
    return out;
  }
  fail("{}: tensor '{}' is {}; expected I32 or I64 ({})", path_, name, dtype_name(t.dtype()), what);
}

std::vector<std::string> LayerInputs::unread() const {
  std::vector<std::string> out;
  for (const TensorInfo& i : file_.tensors())
    if (!read_.count(i.name)) out.push_back(i.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fp4cl::cli
