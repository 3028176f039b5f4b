#include "kernels/w4a16_int_switch.hpp"

#include <cstdlib>
#include <string>

#include "support/check.hpp"

namespace fp4cl {

bool w4a16_int_enabled() {
  const char* env = std::getenv("FP4CL_W4A16_INT");
  const std::string choice = env ? env : "";
  if (!choice.empty() && choice != "0" && choice != "1")
    fail("FP4CL_W4A16_INT = '{}': expected 0 (W4A16 keeps exact BF16 products: no integer activations) or 1 "
         "(the default)",
         choice);
  return choice != "0";
}

}  // namespace fp4cl
