// SafetensorsModel: a model directory's tensors across shards, found through
// model.safetensors.index.json, or a single model.safetensors.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>
#include <utility>

#include "checkpoint/safetensors_header.hpp"
#include "checkpoint/strict_json.hpp"
#include "fp4cl/safetensors.hpp"
#include "support/check.hpp"
#include "support/text.hpp"

namespace fp4cl {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) fail("{} '{}': cannot read: {}", what, path, ec.message());
  if (size > kMaxSafetensorsHeaderBytes) {
    fail("{} '{}': {} bytes, more than the limit of {}", what, path, size, kMaxSafetensorsHeaderBytes);
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail("{} '{}': read failed", what, path);
  return text;
}

// A shard name from an index must stay inside the model directory.
void check_shard_name(const std::string& shard, const std::string& tensor, const std::string& where) {
  const fs::path p(shard);
  bool escapes = shard.empty() || p.is_absolute() || p.has_root_name();
  for (const fs::path& part : p) escapes = escapes || part == "..";
  if (escapes) {
    fail(
        "{}: weight_map names the shard \"{}\" for tensor '{}'; expected a file name inside the "
        "model directory",
        where, shard, tensor);
  }
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail("safetensors model '{}' does not exist", path);

  std::string index_path;
  std::string single_path;
  if (fs::is_directory(status)) {
    const fs::path dir(path);
    if (fs::exists(dir / kIndexName, ec)) {
      index_path = (dir / kIndexName).string();
    } else if (fs::exists(dir / kSingleName, ec)) {
      single_path = (dir / kSingleName).string();
    } else {
      fail("safetensors model directory '{}' has neither {} nor {}", path, kIndexName, kSingleName);
    }
  } else if (ends_with(path, ".index.json")) {
    index_path = path;
  } else {
    single_path = path;
  }

  SafetensorsModel model;
  if (!single_path.empty()) {
    model.source_ = single_path;
    model.shards_.push_back(SafetensorsFile::open(single_path));
    for (const TensorInfo& t : model.shards_[0].tensors()) model.location_.emplace(t.name, 0);
    return model;
  }

  model.source_ = index_path;
  const std::string where = "safetensors index '" + index_path + "'";
  const nlohmann::json root = parse_strict_json(read_text_file(index_path, "safetensors index"), where);
  if (!root.is_object()) fail("{}: expected a JSON object with a \"weight_map\"", where);
  const auto weight_map = root.find("weight_map");
  if (weight_map == root.end()) fail("{}: has no \"weight_map\"", where);
  if (!weight_map->is_object())
    fail("{}: \"weight_map\" has JSON type {}, expected object", where, weight_map->type_name());

  // Every shard the weight_map names, in name order, with the tensors it is said to hold.
  std::map<std::string, std::set<std::string>> listed;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      fail("{}: weight_map entry for tensor '{}' has JSON type {}, expected a shard file name (string)",
           where, tensor, shard.type_name());
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    check_shard_name(shard_name, tensor, where);
    listed[shard_name].insert(tensor);
  }

  const fs::path dir = fs::path(index_path).parent_path();
  for (const auto& [shard_name, tensors] : listed) {
    const std::string shard_path = (dir / shard_name).string();
    if (!fs::exists(shard_path, ec)) {
      fail("{}: weight_map puts tensor '{}' in shard '{}', but '{}' does not exist", where, *tensors.begin(),
           shard_name, shard_path);
    }
    const std::size_t shard_index = model.shards_.size();
    model.shards_.push_back(SafetensorsFile::open(shard_path));
    const SafetensorsFile& file = model.shards_.back();
    for (const TensorInfo& t : file.tensors()) {
      auto [it, inserted] = model.location_.emplace(t.name, shard_index);
      if (!inserted) {
        fail("{}: tensor '{}' is in two shards, '{}' and '{}'", where, t.name,
             model.shards_[it->second].path(), shard_path);
      }
      if (tensors.count(t.name) == 0) {
        fail("{}: shard '{}' holds tensor '{}', which the weight_map does not put there", where, shard_path,
             t.name);
      }
    }
    for (const std::string& tensor : tensors) {
      if (!file.contains(tensor)) {
        fail("{}: weight_map puts tensor '{}' in shard '{}', which has no such tensor", where, tensor,
             shard_path);
      }
    }
  }
  return model;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> names;
  names.reserve(location_.size());
  for (const auto& entry : location_) names.push_back(entry.first);
  return names;
}

bool SafetensorsModel::contains(std::string_view name) const { return location_.count(name) != 0; }

std::optional<TensorView> SafetensorsModel::find(std::string_view name) const {
  auto it = location_.find(name);
  if (it == location_.end()) return std::nullopt;
  return shards_[it->second].find(name);
}

TensorView SafetensorsModel::tensor(std::string_view name) const {
  if (auto view = find(name)) return *std::move(view);
  fail("safetensors model '{}' has no tensor '{}' ({} tensors in {} files)", source_, name, location_.size(),
       shards_.size());
}

}  // namespace fp4cl
