// One quantized linear module of a checkpoint, bound to its tensors: the views a load reads, with
// presence, dtypes and shapes already checked against the module's scheme and the producer's
// layout (FP4.md §5). Values (NaN scales, zero global scales) are checked when preparing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/quant_config.hpp"
#include "fp4cl/safetensors.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl::detail {

struct QuantizedModule {
  std::string name;
  QuantScheme scheme;
  QuantProducer producer = QuantProducer::modelopt;
  ScaleDirection direction = ScaleDirection::none;  // of both global scales
  std::int64_t n = 0;                               // out_features
  std::int64_t k = 0;                               // in_features
  TensorView weight;                                // U8 [n, k/2]
  TensorView weight_scale;                          // [n, k/block]: F8_E4M3 (NVFP4), U8 or F8_E8M0 (MXFP4)
  std::optional<TensorView> weight_global_scale;    // NVFP4: F32 [] or [1]
  std::optional<TensorView> input_global_scale;     // NVFP4 W4A4: F32 [] or [1]
  std::optional<TensorView> bias;                   // "<module>.bias" where the checkpoint has one: BF16 or F32 [n]

  // "model.layers.0.mlp.down_proj (NVFP4 W4A4, ModelOpt)", for messages.
  std::string describe() const;
  // The bytes a load reads.
  std::uint64_t stored_bytes() const;
};

// Binds `module` (quantized with `scheme` under `config`) to its tensors in `model`. Throws
// fp4cl::Error naming the tensor, its file (or the model, for a missing tensor) and what was
// expected, for a missing tensor, a wrong dtype, or a shape that disagrees with the weight's.
// Tensors the scheme has no use for (a W4A16 module's activation scales) are not looked at.
QuantizedModule bind_quantized_module(const SafetensorsModel& model, const QuantConfig& config, std::string module,
                                      const QuantScheme& scheme);

// The module's bias as fp32 (BF16 converts exactly), empty when it has none. Throws fp4cl::Error
// naming the tensor and its file for a value that is not finite.
std::vector<float> module_bias(const QuantizedModule& m);

// A BF16 or F32 bias tensor's values as fp32, the same way; `owner` opens the message ("<owner>:
// tensor '<name>' in '<file>' has nan at [i]; a bias must be finite").
std::vector<float> bias_values(const TensorView& bias, const std::string& owner);

}  // namespace fp4cl::detail
