// A whole file mapped read-only into memory (POSIX mmap), unmapped when the object dies.
#pragma once

#include <cstdint>
#include <string>

namespace fp4cl {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the regular file at `path`; throws fp4cl::Error naming it when it cannot be opened or
  // mapped. An empty file gives data() == nullptr and size() == 0.
  static MappedFile open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  void reset() noexcept;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace fp4cl
