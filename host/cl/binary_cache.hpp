// The on-disk cache of program binaries: one file per (source, options, device, driver,
// platform), written atomically and validated on read. A file that is unreadable, truncated,
// altered or written for another key is reported as such, never trusted.
//
// File layout: "FP4CLBIN1\n", the key's length (8 bytes, little endian), the key text, the
// binary's length (8 bytes LE), the binary, then a 16-byte hash of key and binary.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>

#include "fp4cl/device.hpp"

namespace fp4cl::detail {

// The text that identifies a program binary: the source's hash and every other input that,
// changed, makes a built binary invalid. Stored whole in the entry and compared on read.
std::string program_cache_key(std::string_view source, std::string_view options, const DeviceInfo& device);

// The file of `key` in `dir`: a hash of the key + ".clbin".
std::filesystem::path cache_entry_path(const std::filesystem::path& dir, std::string_view key);

struct CacheEntryRead {
  enum Status { found, missing, corrupt, stale } status = missing;
  std::string binary;   // when found
  std::string problem;  // when corrupt or stale: what is wrong with the file
};

CacheEntryRead read_cache_entry(const std::filesystem::path& path, std::string_view key);

// Writes the entry to a uniquely named temporary file next to `path` and renames it into place,
// so that readers (other threads or processes) see the old entry or the new one, never a part.
// Creates the directory. Returns "" on success, else what failed (the temporary is removed).
std::string write_cache_entry(const std::filesystem::path& path, std::string_view key, std::string_view binary);

// The build of one entry, held across processes and threads: an advisory lock (flock) on
// "<entry>.lock" beside it. A program cache that misses an entry takes it before compiling and
// reads the entry again once it has it, so that processes missing the same entry at once (the ranks
// of one host starting together, ctest's parallel test processes) compile it once while the others
// wait for its binary, instead of each compiling the same program. The holder removes the lock
// file when done (after the entry is written: a process that comes later finds the entry, and one
// still waiting on the removed file takes its lock and finds the entry too).
// Best effort: where the lock file cannot be created (a read-only directory) or the lock is not
// granted within `max_wait` (a holder hung in its driver's compiler), held() is false and the
// caller builds anyway, as it would have without the lock. A process that dies releases its lock.
class CacheEntryBuildLock {
 public:
  explicit CacheEntryBuildLock(const std::filesystem::path& entry,
                               std::chrono::milliseconds max_wait = std::chrono::minutes(5));
  ~CacheEntryBuildLock();
  CacheEntryBuildLock(const CacheEntryBuildLock&) = delete;
  CacheEntryBuildLock& operator=(const CacheEntryBuildLock&) = delete;

  bool held() const { return fd_ >= 0; }
  bool waited() const { return waited_; }  // another holder had it first

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool waited_ = false;
};

}  // namespace fp4cl::detail
