#include "checkpoint/staged_model_directory.hpp"

#include <unistd.h>

#include <atomic>
#include <system_error>

#include "checkpoint/atomic_file.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl::detail {

namespace fs = std::filesystem;

namespace {

fs::path normalized(const fs::path& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) fail("cannot resolve output path '{}': {}", path.string(), ec.message());
  p = p.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "out/" → "out"
  return p;
}

// A fresh directory beside `target`: "<parent>/.<name>.<tag>.<pid>.<n>", created with the
// process's umask like any directory.
fs::path create_sibling_directory(const fs::path& target, const char* tag) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const fs::path candidate = target.parent_path() / fmt::format(".{}.{}.{}.{}", target.filename().string(),
                                                                  tag, ::getpid(), counter.fetch_add(1));
    std::error_code ec;
    if (fs::create_directory(candidate, ec)) return candidate;
    if (ec) fail("cannot create a staging directory beside '{}': {}", target.string(), ec.message());
  }
  fail("cannot create a staging directory beside '{}': every name tried exists", target.string());
}

bool is_empty_directory(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_empty(path, ec) && !ec;
}

}  // namespace

StagedModelDirectory::StagedModelDirectory(fs::path target, bool overwrite)
    : target_(normalized(target)), overwrite_(overwrite) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(target_, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) fail("output '{}' exists and is not a directory", target_.string());
    if (!is_empty_directory(target_)) {
      if (!overwrite_) {
        fail("output directory '{}' exists and is not empty; choose another one or allow overwriting it",
             target_.string());
      }
      // Overwriting deletes the old directory: only ever a model directory.
      if (!fs::exists(target_ / "config.json", ec)) {
        fail("refusing to replace '{}': it is not a model directory (it has no config.json)",
             target_.string());
      }
    }
  }
  fs::create_directories(target_.parent_path(), ec);
  if (ec) fail("cannot create '{}': {}", target_.parent_path().string(), ec.message());
  staging_ = create_sibling_directory(target_, "staging");
}

StagedModelDirectory::~StagedModelDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (ec) log::warn("could not remove the staging directory '{}': {}", staging_.string(), ec.message());
}

void StagedModelDirectory::write_text(const std::string& name, const std::string& text) {
  write_file_atomically((staging_ / name).string(), {{text.data(), text.size()}});
}

void StagedModelDirectory::copy_file(const fs::path& source) {
  std::error_code ec;
  fs::copy_file(source, staging_ / source.filename(), fs::copy_options::none, ec);
  if (ec) fail("cannot copy '{}' into the output: {}", source.string(), ec.message());
}

std::vector<std::string> StagedModelDirectory::write_tensors(const SafetensorsWriter& tensors,
                                                             std::uint64_t total_bytes,
                                                             std::uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) fail("the maximum shard size must be positive");
  if (total_bytes <= max_shard_bytes) {
    tensors.write((staging_ / "model.safetensors").string());
    return {"model.safetensors"};
  }
  std::vector<std::string> names = tensors.write_sharded(staging_.string(), max_shard_bytes);
  names.push_back("model.safetensors.index.json");
  return names;
}

void StagedModelDirectory::commit() {
  if (committed_) fail("internal error: '{}' committed twice", target_.string());
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec)) && !is_empty_directory(target_)) {
    if (!overwrite_) fail("output directory '{}' was filled while it was being written", target_.string());
    // Move the old directory aside, the new one in, then delete the old one.
    const fs::path old = create_sibling_directory(target_, "replaced");
    fs::remove(old, ec);
    fs::rename(target_, old, ec);
    if (ec) fail("cannot replace '{}': moving it aside failed: {}", target_.string(), ec.message());
    fs::rename(staging_, target_, ec);
    if (ec) {
      std::error_code restore;
      fs::rename(old, target_, restore);
      fail("cannot move the new model into '{}': {}", target_.string(), ec.message());
    }
    committed_ = true;
    fs::remove_all(old, ec);
    if (ec) log::warn("could not remove the replaced directory '{}': {}", old.string(), ec.message());
    return;
  }
  // rename(2) replaces an empty directory.
  fs::rename(staging_, target_, ec);
  if (ec) fail("cannot move the new model into '{}': {}", target_.string(), ec.message());
  committed_ = true;
}

}  // namespace fp4cl::detail
