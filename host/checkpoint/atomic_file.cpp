#include "checkpoint/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "support/check.hpp"

namespace fp4cl {
namespace {

std::string temporary_name(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
  const std::filesystem::path target(path);
  const std::string name = "." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(counter.fetch_add(1));
  return (target.parent_path() / name).string();
}

// Writes all of [data, data + size) to fd; returns false with errno set on failure.
bool write_all(int fd, const std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces) {
  const std::string temp = temporary_name(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot write '{}': cannot create '{}': {}", path, temp, std::strerror(errno));

  const char* failed_step = nullptr;
  for (const ByteRange& piece : pieces) {
    if (!write_all(fd, static_cast<const std::uint8_t*>(piece.data), piece.size)) {
      failed_step = "write";
      break;
    }
  }
  if (failed_step == nullptr && ::fsync(fd) != 0) failed_step = "fsync";
  int error = errno;
  if (::close(fd) != 0 && failed_step == nullptr) {
    failed_step = "close";
    error = errno;
  }
  if (failed_step == nullptr && ::rename(temp.c_str(), path.c_str()) != 0) {
    failed_step = "rename";
    error = errno;
  }
  if (failed_step != nullptr) {
    ::unlink(temp.c_str());
    fail("cannot write '{}': {} failed: {}", path, failed_step, std::strerror(error));
  }
}

}  // namespace fp4cl
