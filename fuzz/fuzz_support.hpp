// What the fuzz targets share: the contract they check, a reader of structured values from the
// fuzzer's bytes, and a scratch directory for targets whose input is a file or a directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <unistd.h>

#include "fp4cl/error.hpp"

namespace fp4cl::fuzz {

// The contract for bad input: the call returns, or throws fp4cl::Error with a message. Any
// other exception is a finding: it is printed and the process aborts, which libFuzzer (and the
// replay driver under ctest) reports with the input that caused it. Returns whether `f` returned.
template <typename F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const fp4cl::Error& e) {
    if (std::strlen(e.what()) == 0) {
      std::fprintf(stderr, "fp4cl fuzz: an fp4cl::Error without a message\n");
      std::abort();
    }
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4cl fuzz: an exception other than fp4cl::Error escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fp4cl fuzz: a non-std exception escaped\n");
    std::abort();
  }
}

// A property of an accepted input that does not hold: print and stop with a trap.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fp4cl fuzz: %s\n", what.c_str());
  __builtin_trap();  // a signal libFuzzer handles, so it writes the input as an artifact (after abort() it wrote none)
}

// Reads little-endian integers and floats from the input; past its end every read gives 0.
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{u8()} << (8 * i);
    return v;
  }
  float f32() {
    const std::uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  // A value in [lo, hi].
  std::int64_t range(std::int64_t lo, std::int64_t hi) { return lo + static_cast<std::int64_t>(u8()) % (hi - lo + 1); }
  // A value on a coarse grid: step × an integer in [lo, hi] (exact in fp32 and BF16).
  float grid(std::int64_t lo, std::int64_t hi, float step) { return static_cast<float>(range(lo, hi)) * step; }
  std::size_t left() const { return size_ - at_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// A directory of this process's own, emptied before each input (libFuzzer runs inputs one after
// the other in one process). Removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fp4cl-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) finding("cannot create a scratch directory under " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  // The directory, emptied.
  const std::filesystem::path& fresh() {
    for (const auto& entry : std::filesystem::directory_iterator(path_)) std::filesystem::remove_all(entry.path());
    return path_;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace fp4cl::fuzz
