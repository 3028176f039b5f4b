// What a SafetensorsFile and its TensorViews share: the file's bytes (mapped or owned) and its
// validated header, with a name index.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/mapped_file.hpp"
#include "checkpoint/safetensors_header.hpp"

namespace fp4cl::detail {

struct SafetensorsStorage {
  std::string path;                 // or the label of in-memory bytes
  MappedFile mapping;               // the file's bytes when opened from disk
  std::vector<std::uint8_t> owned;  // the file's bytes when given in memory
  const std::uint8_t* bytes = nullptr;
  std::uint64_t size = 0;
  SafetensorsHeader header;
  std::map<std::string, std::size_t, std::less<>> by_name;  // name → index into header.tensors
};

}  // namespace fp4cl::detail
