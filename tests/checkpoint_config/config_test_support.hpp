// Helpers for the quantization-config tests: fixture paths, layout checks (error-message checks and temp dirs:
// support/errors.hpp, support/temp_dir.hpp, included here).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>

#include "fp4cl/error.hpp"
#include "fp4cl/quant_config.hpp"
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

// Expects layout t to name these tensors, with this global-scale direction (FP4.md §5).
inline void expect_layout(const TensorLayout& t, const std::string& weight, const std::string& weight_scale,
                          const std::string& weight_global_scale, const std::string& input_global_scale,
                          ScaleDirection direction) {
  EXPECT_EQ(t.weight, weight);
  EXPECT_EQ(t.weight_scale, weight_scale);
  EXPECT_EQ(t.weight_global_scale, weight_global_scale);
  EXPECT_EQ(t.input_global_scale, input_global_scale);
  EXPECT_EQ(t.global_scale_direction, direction);
}

}  // namespace fp4cl::test
