// SafetensorsWriter: the official package's layout (dtype-descending then name order, header
// padded with spaces to a multiple of 8 bytes), atomic file writes, and sharded output with an index.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "checkpoint/atomic_file.hpp"
#include "checkpoint/strict_json.hpp"
#include "checkpoint/tensor_bytes.hpp"
#include "fp4cl/safetensors.hpp"
#include "support/check.hpp"

namespace fp4cl {
namespace {

void check_utf8(const std::string& text, const char* what) {
  if (auto bad = find_invalid_utf8(text))
    fail("safetensors writer: {} is not valid UTF-8 (byte {})", what, *bad);
}

}  // namespace

SafetensorsWriter& SafetensorsWriter::add_pending(std::string name, Pending tensor) {
  check_utf8(name, "a tensor name");
  if (name == "__metadata__")
    fail("safetensors writer: \"__metadata__\" is reserved and cannot name a tensor");
  if (tensors_.count(name) != 0) fail("safetensors writer: tensor '{}' added twice", name);
  const TensorBytes size = tensor_bytes(tensor.dtype, tensor.shape);
  switch (size.status) {
    case TensorBytes::Status::ok:
      break;
    case TensorBytes::Status::negative_dimension:
      fail("safetensors writer: tensor '{}' has the negative dimension {} in shape {}", name,
           tensor.shape[size.bad_dim], shape_string(tensor.shape));
    case TensorBytes::Status::overflow:
      fail("safetensors writer: tensor '{}' of shape {} holds more than 2^64 bits", name,
           shape_string(tensor.shape));
    case TensorBytes::Status::partial_byte:
      fail("safetensors writer: tensor '{}': shape {} of {} does not fill whole bytes", name,
           shape_string(tensor.shape), dtype_name(tensor.dtype));
  }
  if (size.bytes != tensor.size) {
    fail("safetensors writer: tensor '{}': shape {} of {} needs {} bytes, but {} were given", name,
         shape_string(tensor.shape), dtype_name(tensor.dtype), size.bytes, tensor.size);
  }
  tensors_.emplace(std::move(name), std::move(tensor));
  return *this;
}

SafetensorsWriter& SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<std::int64_t> shape,
                                          std::vector<std::uint8_t> bytes) {
  auto owned = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  const std::uint8_t* data = owned->data();
  const std::uint64_t size = owned->size();
  return add_pending(std::move(name), Pending{dtype, std::move(shape), std::move(owned), data, size});
}

SafetensorsWriter& SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<std::int64_t> shape,
                                          const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  return add(std::move(name), dtype, std::move(shape), std::vector<std::uint8_t>(bytes, bytes + size));
}

SafetensorsWriter& SafetensorsWriter::add(const TensorView& view) { return add(view.name(), view); }

SafetensorsWriter& SafetensorsWriter::add(std::string name, const TensorView& view) {
  return add_pending(std::move(name), Pending{view.dtype(), view.shape(), view.storage_, view.data_,
                                              view.info().size_bytes()});
}

SafetensorsWriter& SafetensorsWriter::set_metadata(std::string key, std::string value) {
  check_utf8(key, "a metadata key");
  check_utf8(value, "a metadata value");
  metadata_[std::move(key)] = std::move(value);
  return *this;
}

std::string SafetensorsWriter::layout(std::vector<Entry>& entries) const {
  // Largest elements first keeps every tensor aligned to its element size; ties by name.
  std::sort(entries.begin(), entries.end(), [](Entry a, Entry b) {
    if (a->second.dtype != b->second.dtype) return a->second.dtype > b->second.dtype;
    return a->first < b->first;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::uint64_t offset = 0;
  for (Entry e : entries) {
    const Pending& t = e->second;
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = dtype_name(t.dtype);
    info["shape"] = t.shape;
    info["data_offsets"] = {offset, offset + t.size};
    header[e->first] = std::move(info);
    offset += t.size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::vector<std::uint8_t> SafetensorsWriter::serialize() const {
  std::vector<Entry> entries;
  for (const auto& entry : tensors_) entries.push_back(&entry);
  const std::string header = layout(entries);
  std::size_t total = 8 + header.size();
  for (Entry e : entries) total += static_cast<std::size_t>(e->second.size);
  std::vector<std::uint8_t> out(total);
  std::uint8_t* p = out.data();
  for (int i = 0; i < 8; ++i) *p++ = static_cast<std::uint8_t>(header.size() >> (8 * i));
  std::memcpy(p, header.data(), header.size());
  p += header.size();
  for (Entry e : entries) {
    if (e->second.size > 0) std::memcpy(p, e->second.data, static_cast<std::size_t>(e->second.size));
    p += e->second.size;
  }
  return out;
}

void SafetensorsWriter::write_entries(const std::string& path, std::vector<Entry> entries) const {
  const std::string header = layout(entries);
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(header.size() >> (8 * i));
  std::vector<ByteRange> pieces{{length, sizeof length}, {header.data(), header.size()}};
  for (Entry e : entries) pieces.push_back({e->second.data, static_cast<std::size_t>(e->second.size)});
  write_file_atomically(path, pieces);
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<Entry> entries;
  for (const auto& entry : tensors_) entries.push_back(&entry);
  write_entries(path, std::move(entries));
}

std::vector<std::string> SafetensorsWriter::write_sharded(const std::string& directory,
                                                          std::uint64_t max_shard_bytes) const {
  if (max_shard_bytes == 0) fail("safetensors writer: max_shard_bytes must be positive");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) fail("safetensors writer: cannot create directory '{}': {}", directory, ec.message());

  // Greedy in name order: a shard takes tensors until the next would exceed the limit.
  std::vector<std::vector<Entry>> shards;
  std::uint64_t shard_bytes = 0;
  std::uint64_t total_bytes = 0;
  for (const auto& entry : tensors_) {
    const std::uint64_t size = entry.second.size;
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + size > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&entry);
    shard_bytes += size;
    total_bytes += size;
  }
  if (shards.empty()) shards.emplace_back();  // a model without tensors still gets one (empty) shard

  std::vector<std::string> names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size()));
    for (Entry e : shards[i]) weight_map[e->first] = names.back();
    write_entries((std::filesystem::path(directory) / names.back()).string(), shards[i]);
  }
  nlohmann::ordered_json index = nlohmann::ordered_json::object();
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = std::move(weight_map);
  const std::string text = index.dump(2) + "\n";
  write_file_atomically((std::filesystem::path(directory) / "model.safetensors.index.json").string(),
                        {{text.data(), text.size()}});
  return names;
}

}  // namespace fp4cl
