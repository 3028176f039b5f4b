// Small helpers of the linear tests: the shared context and which strategies serve a scheme
// (environment variables set for a scope: support/scoped_env.hpp; error messages:
// support/errors.hpp, both included here).
#pragma once

#include <string>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "kernels/linear_kernel.hpp"
#include "support/errors.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl::test {

inline Context& context() {
  static Context ctx = Context::create();
  return ctx;
}

// Whether linear strategy `kernel` accepts layers of `scheme` at all (gemv_int serves W4A4 only),
// asked with a shape every strategy serves; or layers of `scheme` and shape n x k (mma serves
// n % 16 == 0 and k % 64 == 0 only).
inline bool kernel_serves(const std::string& kernel, const QuantScheme& scheme, std::int64_t n = 64,
                          std::int64_t k = 256) {
  LinearConfig config;
  config.scheme = scheme;
  config.n = n;
  config.k = k;
  return static_cast<bool>(linear_kernels().instantiate(kernel)->can_implement(config));
}

}  // namespace fp4cl::test
