// A model directory as one byte string, so that libFuzzer can mutate a whole checkpoint (its
// config files and safetensors shards) as one input. The format is deliberately loose — any
// byte string unpacks to some directory — so that every mutation reaches the loader:
//   repeated { u8 file id, u32 little-endian length, that many bytes (fewer at the end) }
// The file id (mod the number of names) picks one of kModelDirFiles; a later entry for the same
// name replaces the earlier one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace fp4cl::fuzz {

// The files a model directory can hold that the loader reads.
inline const std::vector<std::string>& model_dir_files() {
  static const std::vector<std::string> names = {
      "config.json",
      "hf_quant_config.json",
      "model.safetensors",
      "model.safetensors.index.json",
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
      "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors",
  };
  return names;
}

// The (name, bytes) pairs an archive holds.
std::vector<std::pair<std::string, std::vector<std::uint8_t>>> unpack_model_dir(const std::uint8_t* data,
                                                                                std::size_t size);

// Writes the archive's files into `dir` (which must exist and be empty).
void write_model_dir(const std::filesystem::path& dir, const std::uint8_t* data, std::size_t size);

// The archive of the files of `dir` named in model_dir_files() (others are left out).
std::vector<std::uint8_t> pack_model_dir(const std::filesystem::path& dir);

}  // namespace fp4cl::fuzz
