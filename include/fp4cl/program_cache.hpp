// Builds OpenCL programs from the kernel sources embedded in the library, with -D defines for
// tuning parameters. Programs are cached in memory per context and on disk as device binaries,
// keyed by a hash of the source, the options, the device name, the driver version and the
// platform version. FP4CL_CACHE_DIR chooses the directory (default: $XDG_CACHE_HOME/fp4cl or
// ~/.cache/fp4cl); FP4CL_CACHE_DIR=off disables the disk cache. A corrupt or stale entry is
// rebuilt, never fatal; entries are written to a temporary file and renamed into place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/device.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

// Build options: named integer (or token) defines for tuning parameters plus plain flags.
class BuildOptions {
 public:
  BuildOptions& define(const std::string& name, long long value);
  BuildOptions& define(const std::string& name, const std::string& value = "1");
  BuildOptions& flag(const std::string& flag);
  // The option string handed to clBuildProgram, in a canonical (sorted) order.
  std::string str() const;
  bool operator==(const BuildOptions& o) const { return str() == o.str(); }

 private:
  std::map<std::string, std::string> defines_;
  std::vector<std::string> flags_;
};

struct ProgramCacheStats {
  std::uint64_t memory_hits = 0;   // served from this process
  std::uint64_t disk_hits = 0;     // loaded from a cached binary
  std::uint64_t source_builds = 0; // compiled from source
  std::uint64_t disk_rejected = 0; // cache entries found corrupt or stale (then rebuilt)
  std::uint64_t disk_write_failures = 0;
};

class ProgramCache {
 public:
  // `disk_dir` empty = no disk cache.
  ProgramCache(cl::Context context, cl::Device device, DeviceInfo info, std::string disk_dir);

  // The program built from the embedded file `kernel_file` (path relative to kernels/, e.g.
  // "quantize.cl") with `options`. Build failures throw fp4cl::Error with the build log.
  cl::Program program(const std::string& kernel_file, const BuildOptions& options = {});

  // A new kernel object (kernels carry their arguments, so each user gets its own).
  cl::Kernel kernel(const std::string& kernel_file, const std::string& kernel_name,
                    const BuildOptions& options = {});

  ProgramCacheStats stats() const;
  const std::string& disk_dir() const { return disk_dir_; }

  // The directory FP4CL_CACHE_DIR names (default as above), or "" when it is "off".
  static std::string disk_dir_from_env();

 private:
  cl::Program build(const std::string& source, const std::string& options, const std::string& what);
  cl::Context context_;
  cl::Device device_;
  DeviceInfo info_;
  std::string disk_dir_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, cl::Program> programs_;
  ProgramCacheStats stats_;
};

// The source of an embedded kernel file with its `#include "..."` lines resolved (each file
// included once). Throws fp4cl::Error naming the file when it or an include is missing.
std::string kernel_source(const std::string& kernel_file);

}  // namespace fp4cl
