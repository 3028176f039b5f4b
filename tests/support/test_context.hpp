// One fp4cl::Context per test binary, on the device FP4CL_DEVICE selects (the default device —
// the first GPU, else the PoCL CPU device — when it is unset). Created on first use and shared by
// every test of the binary, so that tests reuse its program cache instead of rebuilding. A test
// that needs a context of its own (another cache directory, a wrapped queue) creates one.
#pragma once

#include "fp4cl/context.hpp"

namespace fp4cl::test {

inline const Context& shared_context() {
  static const Context context = Context::create();
  return context;
}

}  // namespace fp4cl::test
