// Linear::from_checkpoint: a checkpoint's quantized linear module as a layer on the device.
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "support/check.hpp"

namespace fp4cl {

Linear Linear::from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view module,
                               const LinearOptions& options) {
  const LoadedLinear loaded = checkpoint.load_linear(module);
  if (loaded.bias.empty()) return create(ctx, loaded.weight, loaded.scheme, options);
  // The check reads the copy: with it before the copy, GCC 13 knows the copied bias is empty and
  // warns (-Warray-bounds, a false positive) inside std::vector's copy.
  LinearOptions with_bias = options;
  if (!with_bias.bias.empty())
    fail("Linear::from_checkpoint: module '{}' of checkpoint '{}' has its own bias; LinearOptions::bias must be empty "
         "(the checkpoint's is used)",
         module, checkpoint.directory().string());
  with_bias.bias = loaded.bias;
  return create(ctx, loaded.weight, loaded.scheme, with_bias);
}

}  // namespace fp4cl
