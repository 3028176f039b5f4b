#include "fp4cl/scheme.hpp"

namespace fp4cl {

const char* to_string(WeightFormat f) { return f == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4"; }

std::string QuantScheme::name() const {
  return std::string(to_string(weight)) + (w4a16() ? " W4A16" : " W4A4");
}

}  // namespace fp4cl
