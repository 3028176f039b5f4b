#include "model_dir_archive.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

namespace fp4cl::fuzz {

std::vector<std::pair<std::string, std::vector<std::uint8_t>>> unpack_model_dir(const std::uint8_t* data,
                                                                                std::size_t size) {
  const std::vector<std::string>& names = model_dir_files();
  std::map<std::string, std::vector<std::uint8_t>> files;
  std::size_t at = 0;
  while (at < size) {
    const std::string& name = names[data[at] % names.size()];
    ++at;
    std::uint32_t length = 0;
    for (int i = 0; i < 4 && at < size; ++i, ++at) length |= std::uint32_t{data[at]} << (8 * i);
    const std::size_t n = std::min<std::size_t>(length, size - at);
    files[name] = std::vector<std::uint8_t>(data + at, data + at + n);
    at += n;
  }
  return {files.begin(), files.end()};
}

void write_model_dir(const std::filesystem::path& dir, const std::uint8_t* data, std::size_t size) {
  for (const auto& [name, bytes] : unpack_model_dir(data, size)) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("fuzz: cannot write " + (dir / name).string());
  }
}

std::vector<std::uint8_t> pack_model_dir(const std::filesystem::path& dir) {
  const std::vector<std::string>& names = model_dir_files();
  std::vector<std::uint8_t> archive;
  for (std::size_t id = 0; id < names.size(); ++id) {
    std::ifstream in(dir / names[id], std::ios::binary);
    if (!in) continue;
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    archive.push_back(static_cast<std::uint8_t>(id));
    const auto length = static_cast<std::uint32_t>(bytes.size());
    for (int i = 0; i < 4; ++i) archive.push_back(static_cast<std::uint8_t>(length >> (8 * i)));
    archive.insert(archive.end(), bytes.begin(), bytes.end());
  }
  return archive;
}

}  // namespace fp4cl::fuzz
