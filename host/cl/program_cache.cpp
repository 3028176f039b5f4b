#include "fp4cl/program_cache.hpp"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cl/opencl_calls.hpp"
#include "cl/binary_cache.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

std::string build_log(const cl::Program& program, const cl::Device& device) {
  std::string log;
  if (program.getBuildInfo(device, CL_PROGRAM_BUILD_LOG, &log) != CL_SUCCESS) return "(no build log)";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

std::string kernel_names(const cl::Program& program) {
  std::string names;
  if (program.getInfo(CL_PROGRAM_KERNEL_NAMES, &names) != CL_SUCCESS) return "(unknown)";
  while (!names.empty() && names.back() == '\0') names.pop_back();
  for (char& c : names)
    if (c == ';') c = ' ';
  return names.empty() ? "(none)" : names;
}

}  // namespace

ProgramCache::ProgramCache(cl::Context context, cl::Device device, DeviceInfo info, std::string disk_dir,
                           KernelSources sources)
    : context_(std::move(context)),
      device_(std::move(device)),
      info_(std::move(info)),
      disk_dir_(std::move(disk_dir)),
      sources_(std::move(sources)),
      extra_flags_(build_flags_from_env()) {
  if (!sources_) fail("ProgramCache: no kernel source table given");
  if (!extra_flags_.empty()) {
    std::string list;
    for (const auto& f : extra_flags_) list += (list.empty() ? "" : " ") + f;
    log::info("FP4CL_BUILD_FLAGS: every program for {} is built with {} as well", info_.name, list);
  }
}

std::vector<std::string> ProgramCache::build_flags_from_env() {
  std::vector<std::string> flags;
  const char* v = std::getenv("FP4CL_BUILD_FLAGS");
  if (v == nullptr) return flags;
  // Flags that let the compiler change results: the kernels rely on IEEE arithmetic as written
  // (exact products, the reference's rounding, signed zeros, denormal E2M1 decodes).
  static const char* const kRelaxing[] = {"-cl-fast-relaxed-math",       "-cl-mad-enable",
                                          "-cl-unsafe-math-optimizations", "-cl-finite-math-only",
                                          "-cl-no-signed-zeros",         "-cl-denorms-are-zero",
                                          "-cl-single-precision-constant"};
  std::istringstream in(v);
  bool takes_argument = false;  // the last word was a flag without an argument yet
  for (std::string f; in >> f;) {
    if (takes_argument && f[0] != '-') {  // the previous flag's argument, e.g. -cl-nv-maxrregcount 64
      try {
        BuildOptions().flag(flags.back(), f);
      } catch (const Error&) {
        fail("FP4CL_BUILD_FLAGS: '{}' is not an argument of {} (expected one word, e.g. 64)", f, flags.back());
      }
      flags.back() += " " + f;
      takes_argument = false;
      continue;
    }
    for (const char* r : kRelaxing)
      if (f == r)
        fail("FP4CL_BUILD_FLAGS: {} relaxes the floating-point arithmetic that fp4cl's results rely on; it is not "
             "accepted",
             f);
    if (f.compare(0, 2, "-D") == 0)
      fail("FP4CL_BUILD_FLAGS: {} is a define; fp4cl's kernels take only the defines fp4cl sets", f);
    if (f.compare(0, 2, "-I") == 0)
      fail("FP4CL_BUILD_FLAGS: {} is an include path; fp4cl's kernels include only their embedded files", f);
    try {
      BuildOptions().flag(f);  // one token with a leading '-', no quotes or backslashes
    } catch (const Error&) {
      fail("FP4CL_BUILD_FLAGS: '{}' is not a compiler flag (expected flags separated by spaces, e.g. -cl-nv-verbose)",
           f);
    }
    flags.push_back(f);
    takes_argument = true;
  }
  return flags;
}

std::string ProgramCache::disk_dir_from_env() {
  if (const char* v = std::getenv("FP4CL_CACHE_DIR"); v && *v) {
    std::string s(v);
    std::string lowered = s;
    for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lowered == "off") return {};
    return s;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/fp4cl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fp4cl";
  return {};
}

std::string ProgramCache::disk_dir_for(const DeviceInfo& device) {
  const char* chosen = std::getenv("FP4CL_CACHE_DIR");
  if ((!chosen || !*chosen) && device.is_pocl()) {
    const char* pocl_cache = std::getenv("POCL_KERNEL_CACHE");
    if (!pocl_cache || std::string_view(pocl_cache) != "0") {
      log::debug("program cache: none on disk for {} (PoCL caches its own builds; FP4CL_CACHE_DIR names one)",
                 device.name);
      return {};
    }
  }
  return disk_dir_from_env();
}

// A program from a cached binary, or a null program when there is none or it is unusable.
cl::Program ProgramCache::load_cached(const std::string& entry, const std::string& key, const std::string& options,
                                      const std::string& what, bool* missing) {
  detail::CacheEntryRead read = detail::read_cache_entry(entry, key);
  if (missing) *missing = read.status == detail::CacheEntryRead::missing;
  if (read.status == detail::CacheEntryRead::missing) return {};
  if (read.status != detail::CacheEntryRead::found) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.disk_rejected;
    }
    log::warn("program cache entry {} for {} is {}: {}; rebuilding it", entry, what,
              read.status == detail::CacheEntryRead::stale ? "stale" : "corrupt", read.problem);
    return {};
  }
  const cl::Program::Binaries binaries{std::vector<unsigned char>(read.binary.begin(), read.binary.end())};
  std::vector<cl_int> binary_status;
  cl_int err = CL_SUCCESS;
  cl::Program program(context_, {device_}, binaries, &binary_status, &err);
  if (err == CL_SUCCESS) err = opencl::build_program(program, device_, options);
  if (err == CL_SUCCESS) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.disk_hits;
    return program;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.disk_rejected;
  }
  log::warn("the OpenCL driver refused cached binary {} for {} ({}); rebuilding it", entry, what, cl_status_name(err));
  return {};
}

void ProgramCache::store_cached(const std::string& entry, const std::string& key, const cl::Program& program) {
  std::vector<std::vector<unsigned char>> binaries;
  std::string failure;
  const cl_int err = program.getInfo(CL_PROGRAM_BINARIES, &binaries);
  if (err != CL_SUCCESS) {
    failure = fmt::format("reading the program binary: {}", cl_status_name(err));
  } else if (binaries.size() != 1 || binaries[0].empty()) {
    failure = "the driver returned no program binary";
  } else {
    failure = detail::write_cache_entry(entry, key, std::string(binaries[0].begin(), binaries[0].end()));
  }
  if (failure.empty()) return;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.disk_write_failures;
    first = !write_failure_reported_;
    write_failure_reported_ = true;
  }
  // Warn once per cache (an unwritable directory would otherwise warn on every build).
  log::at(first ? log::Level::warn : log::Level::debug,
          "could not write program cache entry {} ({}); programs are still built, only not cached on disk", entry,
          failure);
}

cl::Program ProgramCache::build(const std::string& kernel_file, const std::string& options) {
  const std::string source = kernel_source(kernel_file, sources_);
  const std::string key = detail::program_cache_key(source, options, info_);
  const std::string entry = disk_dir_.empty() ? std::string() : detail::cache_entry_path(disk_dir_, key).string();

  // A missing entry takes the entry's build lock: another process (or another cache of this one)
  // building the same program holds it, and its entry is there once the lock is granted. (A
  // corrupt, stale or refused entry is rebuilt under the lock without a second look.)
  std::optional<detail::CacheEntryBuildLock> building;
  if (!entry.empty()) {
    bool missing = false;
    if (cl::Program cached = load_cached(entry, key, options, kernel_file, &missing); cached()) return cached;
    building.emplace(entry);
    if (building->waited()) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.disk_waits;
    }
    if (missing) {
      if (cl::Program cached = load_cached(entry, key, options, kernel_file); cached()) return cached;
    }
  }

  const auto started = std::chrono::steady_clock::now();
  cl_int err = CL_SUCCESS;
  cl::Program program(context_, source, false, &err);
  check_cl(err, "creating the program {}", kernel_file);
  // PoCL's compiler writes "N warnings generated." to the process's stderr for every program that
  // has warnings (on AVX2 CPUs, clang's notes that 16-wide vector arguments change the ABI without
  // AVX-512: eight lines for `fp4cl demo`). There the programs are built with -w, which changes no
  // code, unless the log shows debug messages (which print each build log, warnings and all).
  const bool quiet = info_.is_pocl() && !log::enabled(log::Level::debug);
  err = opencl::build_program(program, device_, quiet ? (options.empty() ? "-w" : options + " -w") : options);
  if (err != CL_SUCCESS) {
    const std::string failure_log = build_log(program, device_);
    throw Error(fmt::format("building {} with options \"{}\" on {}: {} ({})\nbuild log:\n{}", kernel_file, options,
                            info_.name, cl_status_name(err), err, failure_log.empty() ? "(empty)" : failure_log),
                err);
  }
  if (log::enabled(log::Level::debug)) {
    const std::string log_text = build_log(program, device_);
    if (!log_text.empty()) log::debug("build log of {} (\"{}\"):\n{}", kernel_file, options, log_text);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.source_builds;
  }
  // Reading the binary back (store_cached) makes some drivers (PoCL) compile the kernels for the
  // device too: counted in the build time.
  if (!entry.empty()) store_cached(entry, key, program);
  log::debug("built {} with \"{}\" from source in {:.2f} s", kernel_file, options,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return program;
}

cl::Program ProgramCache::program(const std::string& kernel_file, const BuildOptions& given) {
  BuildOptions options = given;
  for (const auto& f : extra_flags_) {
    const auto space = f.find(' ');  // "flag value" (build_flags_from_env)
    if (space == std::string::npos)
      options.flag(f);
    else
      options.flag(f.substr(0, space), f.substr(space + 1));
  }
  const auto key = std::make_pair(kernel_file, options.str());
  // Which options a layer's kernels got (the tests of tuned parameters read this line).
  log::debug("program {} with \"{}\"", kernel_file, key.second);
  std::promise<cl::Program> promise;
  std::shared_future<cl::Program> pending;
  bool building = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = programs_.find(key); it != programs_.end()) {
      pending = it->second;
    } else {
      pending = promise.get_future().share();
      programs_.emplace(key, pending);
      building = true;
    }
  }
  if (!building) {
    // Built, or being built by another thread: wait outside the lock (get() rethrows its error).
    cl::Program program = pending.get();
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.memory_hits;
    return program;
  }
  try {
    cl::Program program = build(kernel_file, key.second);
    promise.set_value(program);
    return program;
  } catch (...) {
    // Failures are not cached: a later request builds again (and reports its own error).
    {
      std::lock_guard<std::mutex> lock(mutex_);
      programs_.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

cl::Kernel ProgramCache::kernel(const std::string& kernel_file, const std::string& kernel_name,
                                const BuildOptions& options) {
  const cl::Program prog = program(kernel_file, options);
  cl_int err = CL_SUCCESS;
  cl::Kernel kernel(prog, kernel_name.c_str(), &err);
  if (err == CL_INVALID_KERNEL_NAME) {
    throw Error(fmt::format("creating kernel {} from {}: {} ({}): the program's kernels are: {}", kernel_name,
                            kernel_file, cl_status_name(err), err, kernel_names(prog)),
                err);
  }
  check_cl(err, "creating kernel {} from {}", kernel_name, kernel_file);
  return kernel;
}

ProgramCacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace fp4cl
