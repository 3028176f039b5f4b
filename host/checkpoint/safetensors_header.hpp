// Parsing and validation of a safetensors file's header against the file's size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace fp4cl {

// The official parser refuses headers above 100 MB; so do we.
constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  std::uint64_t data_offset = 0;  // 8 + header length
};

// Parses and validates the safetensors file of `size` bytes at `file` (the whole file: the data
// section is checked to be covered exactly by the tensors). Reads nothing outside [file, file +
// size). Throws fp4cl::Error "safetensors file '<source>': ..." naming the tensor concerned.
SafetensorsHeader parse_safetensors_header(const std::uint8_t* file, std::uint64_t size,
                                           const std::string& source);

}  // namespace fp4cl
