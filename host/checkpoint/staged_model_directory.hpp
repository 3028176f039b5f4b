// A model directory written all at once: files go into a hidden staging directory created beside
// the target (same filesystem), and commit() renames it into place. Until then the target is
// untouched; a StagedModelDirectory destroyed without commit() removes what it wrote.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace fp4cl::detail {

class StagedModelDirectory {
 public:
  // Checks that `target` does not exist or is an empty directory (or, with `overwrite`, a model
  // directory: one holding config.json, which commit() replaces) and creates the staging
  // directory; throws fp4cl::Error naming the path otherwise.
  StagedModelDirectory(std::filesystem::path target, bool overwrite);
  ~StagedModelDirectory();
  StagedModelDirectory(const StagedModelDirectory&) = delete;
  StagedModelDirectory& operator=(const StagedModelDirectory&) = delete;

  const std::filesystem::path& target() const { return target_; }

  // Writes a text file `name` into the staging directory.
  void write_text(const std::string& name, const std::string& text);
  // Copies the regular file `source` into the staging directory under its own name.
  void copy_file(const std::filesystem::path& source);
  // Writes the tensors as one model.safetensors when their data fits in `max_shard_bytes`, else
  // as shards with model.safetensors.index.json. Returns the file names written.
  std::vector<std::string> write_tensors(const SafetensorsWriter& tensors, std::uint64_t total_bytes,
                                         std::uint64_t max_shard_bytes);

  // Moves the staging directory to the target (replacing an existing one when allowed).
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool overwrite_ = false;
  bool committed_ = false;
};

}  // namespace fp4cl::detail
