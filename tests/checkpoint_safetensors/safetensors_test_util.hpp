// Helpers for the safetensors tests: files crafted byte by byte, temporary directories, and
// checks that an fp4cl::Error carries the expected words.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fp4cl/error.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {

// A safetensors file: the little-endian length of `header`, `header`, then `data`.
inline std::vector<std::uint8_t> file_bytes(const std::string& header,
                                            const std::vector<std::uint8_t>& data = {}) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// `n` data bytes 0, 1, 2, ...
inline std::vector<std::uint8_t> counting_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i);
  return v;
}

inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline void write_file(const std::string& path, const std::string& text) {
  write_file(path, std::vector<std::uint8_t>(text.begin(), text.end()));
}

inline std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace fp4cl::test
