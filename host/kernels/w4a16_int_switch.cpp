#include "kernels/w4a16_int_switch.hpp"

#include "support/env_switch.hpp"

namespace fp4cl {

bool w4a16_int_enabled() {
  return env_switch("FP4CL_W4A16_INT", {"0", "1"},
                    "0 (W4A16 keeps exact BF16 products: no integer activations) or 1 (the default)") != "0";
}

}  // namespace fp4cl
