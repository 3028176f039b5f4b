// What a quantized layer is: its weight format and how its activations are treated.
#pragma once

#include <string>

namespace fp4cl {

enum class WeightFormat {
  nvfp4,  // E2M1 elements, blocks of 16 with an E4M3 scale, plus an FP32 global scale
  mxfp4,  // E2M1 elements, blocks of 32 with an E8M0 scale, no global scale
};

enum class Activations {
  fp4_dynamic,  // W4A4: activations quantized to the weight's FP4 format inside the kernel
  bf16,         // W4A16: activations stay BF16
};

struct QuantScheme {
  WeightFormat weight = WeightFormat::nvfp4;
  Activations activations = Activations::fp4_dynamic;

  bool w4a16() const { return activations == Activations::bf16; }
  int block_size() const { return weight == WeightFormat::nvfp4 ? 16 : 32; }
  // "NVFP4 W4A4", "MXFP4 W4A16", ...
  std::string name() const;
  bool operator==(const QuantScheme& o) const { return weight == o.weight && activations == o.activations; }
  bool operator!=(const QuantScheme& o) const { return !(*this == o); }
};

inline int block_size(WeightFormat f) { return f == WeightFormat::nvfp4 ? 16 : 32; }
const char* to_string(WeightFormat f);

}  // namespace fp4cl
