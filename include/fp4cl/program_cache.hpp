// Builds OpenCL programs from the kernel sources embedded in the library, with -D defines for
// tuning parameters. Programs are cached in memory per context and on disk as device binaries,
// keyed by a hash of the source, the options, the device name, the driver version and the
// platform version. FP4CL_CACHE_DIR chooses the directory (default: $XDG_CACHE_HOME/fp4cl or
// ~/.cache/fp4cl, except on PoCL, which caches its builds itself: disk_dir_for);
// FP4CL_CACHE_DIR=off disables the disk cache. A corrupt or stale entry is
// rebuilt (with a warning), never fatal; entries are written to a temporary file and renamed
// into place, so concurrent processes may share a directory, and a process that misses an entry
// another is building waits for that build (a lock file beside the entry) instead of repeating it.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp4cl/device.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

// Build options: named defines for tuning parameters plus plain compiler flags. str() is
// canonical: defines sorted by name, then flags sorted, so equal option sets give equal strings
// (and equal cache keys) whatever order they were added in.
class BuildOptions {
 public:
  // -D<name>=<value>. `name` must be a C identifier; `value` a non-empty token without white
  // space, quotes or backslashes. Defining a name again replaces its value. Throws fp4cl::Error.
  BuildOptions& define(const std::string& name, long long value);
  BuildOptions& define(const std::string& name, const std::string& value = "1");
  // One compiler flag such as "-cl-mad-enable": it starts with '-', has no white space or
  // quotes, and is neither -D (use define) nor -I (includes come from the kernel table).
  // Adding a flag twice keeps one. Throws fp4cl::Error.
  BuildOptions& flag(const std::string& flag);
  // A compiler flag and its argument as two words, e.g. ("-cl-nv-maxrregcount", "64"), kept
  // together (str() writes "-cl-nv-maxrregcount 64"): `flag` as above, `value` one token that
  // does not start with '-'. Throws fp4cl::Error. (That example is the cl_nv_compiler_options
  // text; NVIDIA's driver 580 fails a build given it, bench/gpu/history.md.)
  BuildOptions& flag(const std::string& flag, const std::string& value);
  // The option string handed to clBuildProgram, in the canonical order.
  std::string str() const;
  bool operator==(const BuildOptions& o) const { return str() == o.str(); }
  bool operator!=(const BuildOptions& o) const { return !(*this == o); }

 private:
  std::map<std::string, std::string> defines_;
  std::vector<std::string> flags_;
};

// Where kernel files come from: the text of the file at `path` (relative to kernels/, e.g.
// "common/formats.cl"), or nullopt when there is none. The text must stay valid for as long as
// the lookup object lives.
using KernelSources = std::function<std::optional<std::string_view>(std::string_view path)>;

// The kernel files embedded in the library at build time (every kernels/**/*.cl).
KernelSources embedded_kernel_sources();

// The source of kernel file `kernel_file` with its `#include "path"` lines resolved against the
// same table (each file included once, `#line` directives keeping compiler messages pointing at
// the right file and line). Throws fp4cl::Error naming the file, or the includer and the line,
// when a file is missing. The one-argument form uses the embedded files.
std::string kernel_source(const std::string& kernel_file);
std::string kernel_source(const std::string& kernel_file, const KernelSources& sources);

struct ProgramCacheStats {
  std::uint64_t memory_hits = 0;   // served from this process
  std::uint64_t disk_hits = 0;     // loaded from a cached binary
  std::uint64_t source_builds = 0; // compiled from source
  std::uint64_t disk_rejected = 0; // cache entries found corrupt or stale, or refused by the driver (then rebuilt)
  std::uint64_t disk_write_failures = 0;
  std::uint64_t disk_waits = 0;    // misses that waited for another process's (or cache's) build of the entry
};

// Thread-safe. Concurrent requests for the same program build it once; different programs
// build in parallel. With a disk cache, so do processes (and caches) sharing its directory: a miss
// takes the entry's build lock (a flock on a file beside it) and the others wait for the binary.
class ProgramCache {
 public:
  // `disk_dir` empty = no disk cache. `sources` = where kernel files come from.
  ProgramCache(cl::Context context, cl::Device device, DeviceInfo info, std::string disk_dir,
               KernelSources sources = embedded_kernel_sources());
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // The program built from kernel file `kernel_file` (path relative to kernels/, e.g.
  // "quantize.cl") with `options`. Build failures throw fp4cl::Error with the build log.
  cl::Program program(const std::string& kernel_file, const BuildOptions& options = {});

  // A new kernel object (kernels carry their arguments, so each user gets its own).
  cl::Kernel kernel(const std::string& kernel_file, const std::string& kernel_name,
                    const BuildOptions& options = {});

  ProgramCacheStats stats() const;
  const std::string& disk_dir() const { return disk_dir_; }

  // The directory FP4CL_CACHE_DIR names (default as above), or "" when it is "off" (any case) or
  // when neither XDG_CACHE_HOME nor HOME is set.
  static std::string disk_dir_from_env();

  // The disk cache a Context on `device` uses: disk_dir_from_env(), except that with
  // FP4CL_CACHE_DIR unset a PoCL device whose own kernel cache is on (POCL_KERNEL_CACHE unset or
  // not 0) gets none. PoCL caches each program and each kernel it compiles for a launch's
  // work-group size itself; reading a program's binary back, as storing it takes, makes PoCL
  // compile every kernel of the program once more for any work-group size, code a launch never
  // runs. On a 2-core VM the whole ctest with empty caches took 626 s without fp4cl's copy
  // against 913 s with it, and 253 s against 261-265 s with warm caches (README, CI time).
  static std::string disk_dir_for(const DeviceInfo& device);

  // The compiler flags FP4CL_BUILD_FLAGS lists (separated by white space), which every program of
  // this cache is built with besides its own options (and which are part of its cache key): for
  // diagnostics, e.g. NVIDIA's -cl-nv-verbose (the register report in each build log, printed at
  // FP4CL_LOG=debug); a word that does not start with '-' is the argument of the flag before it
  // (one entry, "flag value"). Read when a cache is created.
  // Throws fp4cl::Error naming the variable for a define (-D), an include path (-I), a word that
  // is not a flag's argument, or a flag that relaxes the floating-point arithmetic the kernels'
  // exactness rests on (-cl-fast-relaxed-math, -cl-mad-enable, -cl-unsafe-math-optimizations,
  // -cl-finite-math-only, -cl-no-signed-zeros, -cl-denorms-are-zero,
  // -cl-single-precision-constant).
  static std::vector<std::string> build_flags_from_env();

 private:
  cl::Program build(const std::string& kernel_file, const std::string& options);
  // *missing: there was no entry (not a corrupt, stale or refused one).
  cl::Program load_cached(const std::string& entry, const std::string& key, const std::string& options,
                          const std::string& what, bool* missing = nullptr);
  void store_cached(const std::string& entry, const std::string& key, const cl::Program& program);

  cl::Context context_;
  cl::Device device_;
  DeviceInfo info_;
  std::string disk_dir_;
  KernelSources sources_;
  std::vector<std::string> extra_flags_;  // build_flags_from_env()
  mutable std::mutex mutex_;  // guards programs_, stats_, write_failure_reported_
  std::map<std::pair<std::string, std::string>, std::shared_future<cl::Program>> programs_;
  ProgramCacheStats stats_;
  bool write_failure_reported_ = false;
};

}  // namespace fp4cl
