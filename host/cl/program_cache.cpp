#include "fp4cl/program_cache.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/check.hpp"
#include "support/hash.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- BuildOptions

BuildOptions& BuildOptions::define(const std::string& name, long long value) {
  return define(name, std::to_string(value));
}
BuildOptions& BuildOptions::define(const std::string& name, const std::string& value) {
  if (name.empty() || name.find_first_of(" \t=\"'") != std::string::npos)
    fail("BuildOptions: invalid define name '{}'", name);
  if (value.find_first_of(" \t\"'") != std::string::npos)
    fail("BuildOptions: the value '{}' of define {} has white space or quotes", value, name);
  defines_[name] = value;
  return *this;
}
BuildOptions& BuildOptions::flag(const std::string& f) {
  flags_.push_back(f);
  return *this;
}
std::string BuildOptions::str() const {
  std::string s;
  for (const auto& [name, value] : defines_) s += fmt::format("{}-D{}={}", s.empty() ? "" : " ", name, value);
  std::vector<std::string> flags = flags_;
  std::sort(flags.begin(), flags.end());
  for (const auto& f : flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

// ---------------------------------------------------------------- disk cache entries
//
// File: "FP4CLBIN1\n", then the key text's length (8 bytes LE), the key text, the binary's length
// (8 bytes LE), the binary, and a 16-byte hash of key+binary. Any mismatch = corrupt → rebuild.

namespace {

constexpr char kMagic[] = "FP4CLBIN1\n";

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
bool get_u64(const std::string& in, std::size_t& pos, std::uint64_t& v) {
  if (in.size() - pos < 8 || pos > in.size()) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  pos += 8;
  return true;
}
std::string checksum(const std::string& key, const std::string& binary) {
  Hash128 h;
  h.update(key).update(binary);
  std::string s;
  put_u64(s, h.a);
  put_u64(s, h.b);
  return s;
}

// Returns the binary, or "" when the entry is missing, corrupt or for another key.
std::string read_entry(const fs::path& path, const std::string& key, bool& rejected) {
  rejected = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  std::size_t pos = sizeof(kMagic) - 1;
  std::uint64_t key_len = 0, bin_len = 0;
  rejected = true;
  if (data.compare(0, pos, kMagic) != 0) return {};
  if (!get_u64(data, pos, key_len) || key_len > data.size() - pos) return {};
  const std::string stored_key = data.substr(pos, key_len);
  pos += key_len;
  if (stored_key != key) return {};
  if (!get_u64(data, pos, bin_len) || bin_len > data.size() - pos || bin_len == 0) return {};
  std::string binary = data.substr(pos, bin_len);
  pos += bin_len;
  if (data.size() - pos != 16 || data.compare(pos, 16, checksum(key, binary)) != 0) return {};
  rejected = false;
  return binary;
}

bool write_entry(const fs::path& path, const std::string& key, const std::string& binary) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return false;
  std::string data(kMagic, sizeof(kMagic) - 1);
  put_u64(data, key.size());
  data += key;
  put_u64(data, binary.size());
  data += binary;
  data += checksum(key, binary);
  // Unique temporary name in the same directory, then an atomic rename.
  const fs::path tmp = path.string() + fmt::format(".tmp.{}.{}", static_cast<long>(::getpid()),
                                                   reinterpret_cast<std::uintptr_t>(&data));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

std::string build_log(const cl::Program& program, const cl::Device& device) {
  std::string log;
  if (program.getBuildInfo(device, CL_PROGRAM_BUILD_LOG, &log) != CL_SUCCESS) return "(no build log)";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log.empty() ? "(empty build log)" : log;
}

}  // namespace

// ---------------------------------------------------------------- ProgramCache

ProgramCache::ProgramCache(cl::Context context, cl::Device device, DeviceInfo info, std::string disk_dir)
    : context_(std::move(context)), device_(std::move(device)), info_(std::move(info)), disk_dir_(std::move(disk_dir)) {}

std::string ProgramCache::disk_dir_from_env() {
  const char* v = std::getenv("FP4CL_CACHE_DIR");
  if (v && *v) {
    const std::string s(v);
    if (s == "off" || s == "OFF" || s == "0") return {};
    return s;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/fp4cl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fp4cl";
  return {};
}

cl::Program ProgramCache::build(const std::string& source, const std::string& options, const std::string& what) {
  const std::string key = fmt::format(
      "fp4cl program cache v1\nsource {}\noptions {}\ndevice {}\ndriver {}\nplatform {}\n",
      Hash128().update(source).hex(), options, info_.name, info_.driver_version, info_.platform_version);
  const fs::path entry = disk_dir_.empty() ? fs::path()
                                           : fs::path(disk_dir_) / (Hash128().update(key).hex() + ".clbin");
  cl_int err = CL_SUCCESS;
  if (!disk_dir_.empty()) {
    bool rejected = false;
    const std::string binary = read_entry(entry, key, rejected);
    if (rejected) {
      ++stats_.disk_rejected;
      log::warn("program cache entry {} for {} is corrupt or stale; rebuilding it", entry.string(), what);
    }
    if (!binary.empty()) {
      const std::vector<unsigned char> bytes(binary.begin(), binary.end());
      cl::Program::Binaries binaries{bytes};
      std::vector<cl_int> status;
      cl::Program program(context_, {device_}, binaries, &status, &err);
      if (err == CL_SUCCESS && program.build({device_}, options.c_str()) == CL_SUCCESS) {
        ++stats_.disk_hits;
        return program;
      }
      ++stats_.disk_rejected;
      log::warn("the driver refused cached binary {} for {}; rebuilding it", entry.string(), what);
    }
  }
  cl::Program program(context_, source, false, &err);
  check_cl(err, "creating the program {}", what);
  err = program.build({device_}, options.c_str());
  if (err != CL_SUCCESS) {
    throw Error(fmt::format("building {} with options \"{}\" on {}: {} ({})\nbuild log:\n{}", what, options,
                            info_.name, cl_status_name(err), err, build_log(program, device_)),
                err);
  }
  ++stats_.source_builds;
  if (!disk_dir_.empty()) {
    std::vector<std::vector<unsigned char>> binaries;
    if (program.getInfo(CL_PROGRAM_BINARIES, &binaries) == CL_SUCCESS && binaries.size() == 1 &&
        !binaries[0].empty()) {
      if (!write_entry(entry, key, std::string(binaries[0].begin(), binaries[0].end()))) {
        ++stats_.disk_write_failures;
        log::warn("could not write program cache entry {}", entry.string());
      }
    }
  }
  return program;
}

cl::Program ProgramCache::program(const std::string& kernel_file, const BuildOptions& options) {
  const std::string opts = options.str();
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(kernel_file, opts);
  if (auto it = programs_.find(key); it != programs_.end()) {
    ++stats_.memory_hits;
    return it->second;
  }
  cl::Program program = build(kernel_source(kernel_file), opts, kernel_file);
  programs_.emplace(key, program);
  return program;
}

cl::Kernel ProgramCache::kernel(const std::string& kernel_file, const std::string& kernel_name,
                                const BuildOptions& options) {
  cl::Program prog = program(kernel_file, options);
  cl_int err = CL_SUCCESS;
  cl::Kernel kernel(prog, kernel_name.c_str(), &err);
  check_cl(err, "creating kernel {} from {}", kernel_name, kernel_file);
  return kernel;
}

ProgramCacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace fp4cl
