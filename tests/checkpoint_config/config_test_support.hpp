// Helpers for the quantization-config tests: fixture paths, error-message checks, temp dirs.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fp4cl/error.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl {

// Lets GoogleTest print schemes by name ("NVFP4 W4A16") in failure messages.
inline void PrintTo(const QuantScheme& scheme, std::ostream* os) { *os << scheme.name(); }

}  // namespace fp4cl

namespace fp4cl::test {

// tests/checkpoint_config/data: model directories with producer-written configs.
inline std::filesystem::path config_data_dir() {
  const char* dir = std::getenv("FP4CL_TEST_DATA_DIR");
  return std::filesystem::path(dir ? dir : ".") / "data";
}

// Runs `f`, which must throw fp4cl::Error with a message containing every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "expected \"" << part << "\" in: " << message;
    }
    return;
  }
  ADD_FAILURE() << "expected an fp4cl::Error";
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "fp4cl-quantcfg-XXXXXX").string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `text` to `<dir>/<name>` and returns the file's path.
  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("writing " + file.string() + " failed");
    return file;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace fp4cl::test
