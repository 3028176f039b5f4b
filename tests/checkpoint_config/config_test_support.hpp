// Helpers for the quantization-config tests: fixture paths (error-message checks and temp dirs:
// support/errors.hpp, support/temp_dir.hpp, included here).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "fp4cl/error.hpp"
#include "fp4cl/scheme.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

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

}  // namespace fp4cl::test
