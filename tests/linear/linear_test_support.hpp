// Small helpers of the linear tests: the shared context, environment variables set for a scope,
// and the message of an expected fp4cl::Error.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "kernels/linear_kernel.hpp"

namespace fp4cl::test {

inline Context& context() {
  static Context ctx = Context::create();
  return ctx;
}

// Whether linear strategy `kernel` accepts layers of `scheme` at all (gemv_int serves W4A4 only);
// asked with a shape every strategy serves.
inline bool kernel_serves(const std::string& kernel, const QuantScheme& scheme) {
  LinearConfig config;
  config.scheme = scheme;
  config.n = 64;
  config.k = 256;
  return static_cast<bool>(linear_kernels().instantiate(kernel)->can_implement(config));
}

// Sets (or, with nullptr, unsets) an environment variable until the end of the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// The message of the fp4cl::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace fp4cl::test
