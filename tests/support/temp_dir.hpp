// A fresh, empty directory under $TMPDIR (or /tmp), removed with its contents on destruction.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <stdlib.h>  // mkdtemp

namespace fp4cl::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fp4cl-test") {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + ".XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("TempDir: mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `name` in the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

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
