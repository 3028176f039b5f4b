// SafetensorsFile: opening (mmap or owned bytes), validation on open, and lookup by name.
#include <utility>

#include "checkpoint/safetensors_storage.hpp"
#include "fp4cl/safetensors.hpp"
#include "support/check.hpp"

namespace fp4cl {
namespace {

std::shared_ptr<const detail::SafetensorsStorage> validated(std::shared_ptr<detail::SafetensorsStorage> s) {
  s->header = parse_safetensors_header(s->bytes, s->size, s->path);
  for (std::size_t i = 0; i < s->header.tensors.size(); ++i) s->by_name.emplace(s->header.tensors[i].name, i);
  return s;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto storage = std::make_shared<detail::SafetensorsStorage>();
  storage->path = path;
  storage->mapping = MappedFile::open(path);
  storage->bytes = storage->mapping.data();
  storage->size = storage->mapping.size();
  return SafetensorsFile(validated(std::move(storage)));
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::uint8_t> bytes, std::string label) {
  auto storage = std::make_shared<detail::SafetensorsStorage>();
  storage->path = std::move(label);
  storage->owned = std::move(bytes);
  storage->bytes = storage->owned.data();
  storage->size = storage->owned.size();
  return SafetensorsFile(validated(std::move(storage)));
}

const std::string& SafetensorsFile::path() const { return storage_->path; }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return storage_->header.tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return storage_->header.metadata;
}
std::uint64_t SafetensorsFile::data_offset() const { return storage_->header.data_offset; }
std::uint64_t SafetensorsFile::file_size() const { return storage_->size; }

bool SafetensorsFile::contains(std::string_view name) const { return storage_->by_name.count(name) != 0; }

std::optional<TensorView> SafetensorsFile::find(std::string_view name) const {
  auto it = storage_->by_name.find(name);
  if (it == storage_->by_name.end()) return std::nullopt;
  const TensorInfo& info = storage_->header.tensors[it->second];
  return TensorView(storage_, &info, storage_->bytes + storage_->header.data_offset + info.begin);
}

TensorView SafetensorsFile::tensor(std::string_view name) const {
  if (auto view = find(name)) return *std::move(view);
  fail("safetensors file '{}' has no tensor '{}' ({} tensors)", storage_->path, name,
       storage_->by_name.size());
}

}  // namespace fp4cl
