// Linear::from_checkpoint: a checkpoint's quantized linear module as a layer on the device.
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"

namespace fp4cl {

Linear Linear::from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view module,
                               const LinearOptions& options) {
  const LoadedLinear loaded = checkpoint.load_linear(module);
  return create(ctx, loaded.weight, loaded.scheme, options);
}

}  // namespace fp4cl
