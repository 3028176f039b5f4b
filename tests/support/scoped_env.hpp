// Sets (or unsets) an environment variable for the lifetime of the object, then restores it.
// Not thread-safe (setenv is not): use it in tests before any thread reads the environment.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace fp4cl::test {

class ScopedEnv {
 public:
  // `value` nullopt = unset the variable.
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = std::string(old);
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace fp4cl::test
