#include "checkpoint/safetensors_header.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "checkpoint/strict_json.hpp"
#include "checkpoint/tensor_bytes.hpp"
#include "support/check.hpp"

namespace fp4cl {
namespace {

using nlohmann::json;

// What a JSON value is, for error messages.
std::string kind_of(const json& value) {
  if (value.is_number_float()) return "a non-integer or out-of-range number";
  if (value.is_number_integer() && !value.is_number_unsigned()) return "a negative number";
  return std::string(value.is_object() || value.is_array() ? "an " : "a ") + value.type_name();
}

// A JSON value for an error message, cut short when long.
std::string brief(const json& value) {
  std::string s = value.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The value of a non-negative JSON integer that fits in 64 bits ("-0" included, as the official
// parser reads it), or nothing.
std::optional<std::uint64_t> non_negative(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
  return std::nullopt;
}

class HeaderParser {
 public:
  HeaderParser(const std::string& source, std::uint64_t data_size)
      : where_("safetensors file '" + source + "'"), data_size_(data_size) {}

  SafetensorsHeader parse(const json& root) {
    if (!root.is_object()) fail("{}: header is {}, expected a JSON object", where_, kind_of(root));
    SafetensorsHeader header;
    for (const auto& [key, value] : root.items()) {
      if (key == "__metadata__") {
        header.metadata = parse_metadata(value);
      } else {
        header.tensors.push_back(parse_tensor(key, value));
      }
    }
    check_layout(header.tensors);
    return header;
  }

 private:
  std::map<std::string, std::string> parse_metadata(const json& value) const {
    std::map<std::string, std::string> metadata;
    if (value.is_null()) return metadata;  // the official package reads null as "no metadata"
    if (!value.is_object())
      fail("{}: __metadata__ is {}, expected an object of strings", where_, kind_of(value));
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) {
        fail("{}: __metadata__ entry \"{}\" is {}, expected a string", where_, key, kind_of(item));
      }
      metadata.emplace(key, item.get<std::string>());
    }
    return metadata;
  }

  // A non-negative integer field value; `what` names it in errors.
  std::uint64_t unsigned_value(const json& value, const std::string& tensor, const char* what) const {
    const auto v = non_negative(value);
    if (!v)
      fail("{}, tensor '{}': {} is {}, expected a non-negative integer", where_, tensor, what,
           kind_of(value));
    return *v;
  }

  const json& field(const json& entry, const std::string& tensor, const char* name) const {
    auto it = entry.find(name);
    if (it == entry.end()) fail("{}, tensor '{}': entry has no \"{}\"", where_, tensor, name);
    return *it;
  }

  TensorInfo parse_tensor(const std::string& name, const json& entry) const {
    if (!entry.is_object()) {
      fail("{}, tensor '{}': entry is {}, expected an object with dtype, shape and data_offsets", where_,
           name, kind_of(entry));
    }
    TensorInfo info;
    info.name = name;

    const json& dtype = field(entry, name, "dtype");
    if (!dtype.is_string())
      fail("{}, tensor '{}': dtype is {}, expected a string", where_, name, kind_of(dtype));
    const auto parsed_dtype = dtype_from_name(dtype.get_ref<const std::string&>());
    if (!parsed_dtype) {
      fail(
          "{}, tensor '{}': unknown dtype \"{}\" (known: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, "
          "F16, BF16, F32, F64, C64, F8_E4M3, F8_E5M2, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F4, "
          "F6_E2M3, F6_E3M2)",
          where_, name, dtype.get_ref<const std::string&>());
    }
    info.dtype = *parsed_dtype;

    const json& shape = field(entry, name, "shape");
    if (!shape.is_array())
      fail("{}, tensor '{}': shape is {}, expected an array", where_, name, kind_of(shape));
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const json& dim = shape[i];
      const auto d = non_negative(dim);
      if (!d && dim.is_number_integer()) {
        fail("{}, tensor '{}': shape {} has the negative dimension {} at position {}", where_, name,
             brief(shape), dim.get<std::int64_t>(), i);
      }
      if (!d) {
        fail("{}, tensor '{}': shape {} has {} at position {}, expected a non-negative integer", where_, name,
             brief(shape), kind_of(dim), i);
      }
      if (*d > static_cast<std::uint64_t>(INT64_MAX)) {
        fail("{}, tensor '{}': shape {} has a dimension above 2^63 - 1 at position {}", where_, name,
             brief(shape), i);
      }
      info.shape.push_back(static_cast<std::int64_t>(*d));
    }

    const json& offsets = field(entry, name, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      fail("{}, tensor '{}': data_offsets is {}, expected an array [begin, end]", where_, name,
           brief(offsets));
    }
    info.begin = unsigned_value(offsets[0], name, "data_offsets[0]");
    info.end = unsigned_value(offsets[1], name, "data_offsets[1]");
    if (info.end < info.begin) {
      fail("{}, tensor '{}': data_offsets [{}, {}] end before they begin", where_, name, info.begin,
           info.end);
    }
    if (info.end > data_size_) {
      fail("{}, tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes)", where_,
           name, info.begin, info.end, data_size_);
    }

    const TensorBytes size = tensor_bytes(info.dtype, info.shape);
    switch (size.status) {
      case TensorBytes::Status::ok:
        break;
      case TensorBytes::Status::negative_dimension:  // excluded above
      case TensorBytes::Status::overflow:
        fail("{}, tensor '{}': shape {} of {} holds more than 2^64 bits", where_, name,
             shape_string(info.shape), dtype_name(info.dtype));
      case TensorBytes::Status::partial_byte:
        fail("{}, tensor '{}': shape {} of {} ({} bits each) does not fill whole bytes", where_, name,
             shape_string(info.shape), dtype_name(info.dtype), dtype_bits(info.dtype));
    }
    if (size.bytes != info.size_bytes()) {
      fail("{}, tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] hold {}", where_, name,
           shape_string(info.shape), dtype_name(info.dtype), size.bytes, info.begin, info.end,
           info.size_bytes());
    }
    return info;
  }

  // Sorted by offset, the tensors must tile the data section exactly, as the official parser
  // requires: no overlap, no gap, nothing left over.
  void check_layout(std::vector<TensorInfo>& tensors) const {
    std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t covered = 0;
    const TensorInfo* previous = nullptr;
    for (const TensorInfo& t : tensors) {
      if (t.begin < covered) {
        fail("{}, tensor '{}': data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", where_, t.name,
             t.begin, t.end, previous->name, previous->begin, previous->end);
      }
      if (t.begin > covered) {
        fail("{}: bytes [{}, {}) of the data section belong to no tensor (before tensor '{}')", where_,
             covered, t.begin, t.name);
      }
      covered = t.end;
      previous = &t;
    }
    if (covered != data_size_) {
      fail("{}: the data section has {} bytes but its tensors cover only the first {} (trailing bytes)",
           where_, data_size_, covered);
    }
  }

  std::string where_;
  std::uint64_t data_size_;
};

}  // namespace

SafetensorsHeader parse_safetensors_header(const std::uint8_t* file, std::uint64_t size,
                                           const std::string& source) {
  if (size < 8)
    fail("safetensors file '{}': {} bytes long, shorter than the 8-byte header length", source, size);
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file[i];  // little-endian
  if (header_bytes > size - 8) {
    fail("safetensors file '{}': header length {} runs past the end of the file ({} bytes)", source,
         header_bytes, size);
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    fail("safetensors file '{}': header length {} exceeds the limit of {} bytes", source, header_bytes,
         kMaxSafetensorsHeaderBytes);
  }
  const std::string_view text(reinterpret_cast<const char*>(file + 8),
                              static_cast<std::size_t>(header_bytes));
  const json root = parse_strict_json(text, "safetensors file '" + source + "': header");

  SafetensorsHeader header = HeaderParser(source, size - 8 - header_bytes).parse(root);
  header.data_offset = 8 + header_bytes;
  return header;
}

}  // namespace fp4cl
