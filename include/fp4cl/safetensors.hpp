// Safetensors checkpoints: a memory-mapped, zero-copy reader for single files and sharded model
// directories, and a writer that lays files out as the official `safetensors` package does.
//
// File format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length
// N, N bytes of UTF-8 JSON `{"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
// ..., "__metadata__": {"key": "value"}}`, then the data section; offsets are relative to its
// start. The reader accepts and refuses what the official parser does (tensors tile the data
// section exactly, without gaps or overlaps; shape × dtype size = byte length; tested against it
// with corrupted files), and also refuses a JSON key that appears twice, where the official
// parser keeps the last. Every failure is an fp4cl::Error naming the file and, where one is
// concerned, the tensor. Data is little-endian, row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp4cl {

// Element types, named and ordered exactly as the official package's Dtype enum (its writer, and
// SafetensorsWriter, lay tensors out in descending order of this enum, then by name).
enum class Dtype : std::uint8_t {
  boolean,      // "BOOL", one byte per element
  f4,           // "F4" (E2M1), 4 bits per element, two per byte
  f6_e2m3,      // "F6_E2M3", 6 bits per element
  f6_e3m2,      // "F6_E3M2", 6 bits per element
  u8,           // "U8"
  i8,           // "I8"
  f8_e5m2,      // "F8_E5M2"
  f8_e4m3,      // "F8_E4M3": torch.float8_e4m3fn / ml_dtypes.float8_e4m3fn (NVFP4 block scales)
  f8_e8m0,      // "F8_E8M0": ml_dtypes.float8_e8m0fnu
  f8_e4m3fnuz,  // "F8_E4M3FNUZ"
  f8_e5m2fnuz,  // "F8_E5M2FNUZ"
  i16,          // "I16"
  u16,          // "U16"
  f16,          // "F16"
  bf16,         // "BF16"
  i32,          // "I32"
  u32,          // "U32"
  f32,          // "F32"
  c64,          // "C64": complex of two F32
  f64,          // "F64"
  i64,          // "I64"
  u64,          // "U64"
};

// The format's name of a dtype ("F8_E4M3").
std::string_view dtype_name(Dtype dtype);
// The dtype a format name denotes, or nothing for an unknown name (names are case-sensitive;
// "F8_E4M3FN" is not a safetensors name: torch.float8_e4m3fn is stored as "F8_E4M3").
std::optional<Dtype> dtype_from_name(std::string_view name);
// Bits per element: 4, 6, 8, 16, 32 or 64.
int dtype_bits(Dtype dtype);

// The dtype whose elements are stored as the C++ type T (float → F32, std::int64_t → I64, ...).
// clang-format off
template <typename T> struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr Dtype value = Dtype::f32; };
template <> struct DtypeOf<double> { static constexpr Dtype value = Dtype::f64; };
template <> struct DtypeOf<std::int8_t> { static constexpr Dtype value = Dtype::i8; };
template <> struct DtypeOf<std::uint8_t> { static constexpr Dtype value = Dtype::u8; };
template <> struct DtypeOf<std::int16_t> { static constexpr Dtype value = Dtype::i16; };
template <> struct DtypeOf<std::uint16_t> { static constexpr Dtype value = Dtype::u16; };
template <> struct DtypeOf<std::int32_t> { static constexpr Dtype value = Dtype::i32; };
template <> struct DtypeOf<std::uint32_t> { static constexpr Dtype value = Dtype::u32; };
template <> struct DtypeOf<std::int64_t> { static constexpr Dtype value = Dtype::i64; };
template <> struct DtypeOf<std::uint64_t> { static constexpr Dtype value = Dtype::u64; };
// clang-format on

// A read-only view of contiguous elements (C++17 has no std::span).
template <typename T>
class Span {
 public:
  Span() = default;
  Span(T* data, std::size_t size) : data_(data), size_(size) {}
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// One tensor's header entry. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::u8;
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::uint64_t begin = 0;          // data_offsets[0]
  std::uint64_t end = 0;            // data_offsets[1]

  std::uint64_t num_elements() const;  // product of the shape (1 for [])
  std::uint64_t size_bytes() const { return end - begin; }
};

// "[2, 3]"
std::string shape_string(const std::vector<std::int64_t>& shape);

namespace detail {
struct SafetensorsStorage;
}

// A tensor inside a safetensors file, pointing at the file's bytes (no copy). A view keeps its
// file mapped: it stays valid after the SafetensorsFile or SafetensorsModel it came from is gone.
// Accessors check what they are asked and throw fp4cl::Error naming the tensor and the file.
class TensorView {
 public:
  const std::string& name() const { return info_->name; }
  Dtype dtype() const { return info_->dtype; }
  const std::vector<std::int64_t>& shape() const { return info_->shape; }
  std::uint64_t num_elements() const { return info_->num_elements(); }
  const TensorInfo& info() const { return *info_; }
  // The file the tensor lives in (or the label given to SafetensorsFile::from_bytes).
  const std::string& file() const;
  // The tensor's raw bytes.
  Span<const std::uint8_t> bytes() const { return {data_, static_cast<std::size_t>(info_->size_bytes())}; }

  // Throw unless the tensor has this dtype / shape; return *this to chain.
  const TensorView& expect_dtype(Dtype dtype) const;
  const TensorView& expect_shape(const std::vector<std::int64_t>& shape) const;

  // The elements as T, in place: T's own dtype (as<float>() needs F32), or `dtype` when its
  // elements have sizeof(T) bytes (as<std::uint16_t>(Dtype::bf16), as<std::uint8_t>(Dtype::f8_e4m3)).
  // Throws when the dtype differs or when the data is not aligned for T (files written without
  // the format's 8-byte padding); to_vector() has no alignment requirement.
  template <typename T>
  Span<const T> as() const {
    return as<T>(DtypeOf<T>::value);
  }
  template <typename T>
  Span<const T> as(Dtype dtype) const {
    check_elements(dtype, sizeof(T), alignof(T));
    return {reinterpret_cast<const T*>(data_), static_cast<std::size_t>(num_elements())};
  }
  // The elements copied out as T, with the same dtype rules as as().
  template <typename T>
  std::vector<T> to_vector() const {
    return to_vector<T>(DtypeOf<T>::value);
  }
  template <typename T>
  std::vector<T> to_vector(Dtype dtype) const {
    check_elements(dtype, sizeof(T), 1);
    std::vector<T> out(static_cast<std::size_t>(num_elements()));
    if (!out.empty()) std::memcpy(out.data(), data_, out.size() * sizeof(T));
    return out;
  }
  // The value of an F32 tensor of shape [] or [1] (ModelOpt and compressed-tensors global scales).
  float scalar_f32() const;

 private:
  friend class SafetensorsFile;
  friend class SafetensorsWriter;
  TensorView(std::shared_ptr<const detail::SafetensorsStorage> storage, const TensorInfo* info,
             const std::uint8_t* data)
      : storage_(std::move(storage)), info_(info), data_(data) {}
  void check_elements(Dtype dtype, std::size_t element_size, std::size_t alignment) const;

  std::shared_ptr<const detail::SafetensorsStorage> storage_;
  const TensorInfo* info_;
  const std::uint8_t* data_;
};

// One safetensors file, validated completely on open. Copies share the same mapping; nothing
// changes after open, so concurrent use is safe. Like any memory-mapped reader, it requires that
// the file is not truncated by someone else while mapped.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header.
  static SafetensorsFile open(const std::string& path);
  // Validates and takes ownership of a file's bytes; `label` names it in errors.
  static SafetensorsFile from_bytes(std::vector<std::uint8_t> bytes, std::string label);

  const std::string& path() const;
  // Every tensor, in data-offset order.
  const std::vector<TensorInfo>& tensors() const;
  // The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const;
  // Where the data section starts in the file (8 + header length) and the file's size.
  std::uint64_t data_offset() const;
  std::uint64_t file_size() const;

  bool contains(std::string_view name) const;
  std::optional<TensorView> find(std::string_view name) const;
  // The named tensor; throws naming the file when it has none of that name.
  TensorView tensor(std::string_view name) const;

 private:
  explicit SafetensorsFile(std::shared_ptr<const detail::SafetensorsStorage> storage)
      : storage_(std::move(storage)) {}
  std::shared_ptr<const detail::SafetensorsStorage> storage_;
};

// A model's tensors across its files: a directory holding `model.safetensors.index.json` (whose
// `weight_map` names the shard of every tensor) or a single `model.safetensors`. Every shard is
// opened and validated; a tensor name found in two shards, a shard missing, or a weight_map that
// disagrees with the shards' contents is an error.
class SafetensorsModel {
 public:
  // `path` is a model directory, a `*.safetensors.index.json` file, or one `.safetensors` file.
  static SafetensorsModel open(const std::string& path);

  // What was opened: the index file or the single safetensors file.
  const std::string& source() const { return source_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  std::size_t size() const { return location_.size(); }

  bool contains(std::string_view name) const;
  std::optional<TensorView> find(std::string_view name) const;
  // The named tensor from whichever shard holds it; throws naming the model when none does.
  TensorView tensor(std::string_view name) const;

 private:
  std::string source_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> location_;  // name → index into shards_
};

// Collects tensors and writes them as a safetensors file the official package reads back
// identically: tensors ordered by dtype (descending, as the package orders them) then name, the
// JSON header padded with spaces so the data section starts at a multiple of 8 bytes. Files are
// written to a temporary name in the target directory and renamed into place.
class SafetensorsWriter {
 public:
  // Adds a tensor; `bytes` must hold exactly shape × dtype-size bytes. Throws on a duplicate name,
  // the name "__metadata__", a name that is not UTF-8, a negative dimension, or a size mismatch.
  SafetensorsWriter& add(std::string name, Dtype dtype, std::vector<std::int64_t> shape,
                         std::vector<std::uint8_t> bytes);
  SafetensorsWriter& add(std::string name, Dtype dtype, std::vector<std::int64_t> shape, const void* data,
                         std::size_t size);
  template <typename T>
  SafetensorsWriter& add(std::string name, std::vector<std::int64_t> shape, const std::vector<T>& values) {
    return add(std::move(name), DtypeOf<T>::value, std::move(shape), values.data(),
               values.size() * sizeof(T));
  }
  // Adds a tensor read from a file, without copying its bytes (the view keeps its file mapped).
  SafetensorsWriter& add(const TensorView& view);
  SafetensorsWriter& add(std::string name, const TensorView& view);
  // A `__metadata__` entry (replaces an earlier value of the key).
  SafetensorsWriter& set_metadata(std::string key, std::string value);

  std::size_t size() const { return tensors_.size(); }
  // The whole file in memory.
  std::vector<std::uint8_t> serialize() const;
  // Writes one file at `path` (atomically).
  void write(const std::string& path) const;
  // Writes the tensors into `directory` (created if needed) as shards
  // `model-00001-of-0000N.safetensors`, filled in name order with at most `max_shard_bytes` of
  // tensor data each (a larger tensor gets a shard of its own), every shard carrying the
  // metadata; then `model.safetensors.index.json` with "metadata": {"total_size": <bytes>} and
  // the "weight_map" — the index last, so that no reader sees an index naming a shard not yet
  // written. Returns the shard file names.
  std::vector<std::string> write_sharded(const std::string& directory, std::uint64_t max_shard_bytes) const;

 private:
  struct Pending {
    Dtype dtype;
    std::vector<std::int64_t> shape;
    std::shared_ptr<const void> owner;  // keeps `data` alive
    const std::uint8_t* data;
    std::uint64_t size;
  };
  using Entry = const std::pair<const std::string, Pending>*;
  SafetensorsWriter& add_pending(std::string name, Pending tensor);
  // The header (padded) for `entries` laid out in file order, which it sorts them into.
  std::string layout(std::vector<Entry>& entries) const;
  void write_entries(const std::string& path, std::vector<Entry> entries) const;

  std::map<std::string, Pending> tensors_;  // by name
  std::map<std::string, std::string> metadata_;
};

}  // namespace fp4cl
