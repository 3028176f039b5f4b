// MoeConfig::from_checkpoint and MoeLayer::from_checkpoint: a checkpoint's MoE layer, with the
// routing its config.json describes, as a layer on the device.
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/model_config.hpp"
#include "fp4cl/moe.hpp"
#include "support/check.hpp"

namespace fp4cl {

MoeConfig MoeConfig::from_checkpoint(const Checkpoint& checkpoint, std::string_view layer) {
  const CheckpointLayer& moe = checkpoint.moe_layer(layer);
  const ModelConfig model = ModelConfig::load(checkpoint.directory());
  const std::string source = model.source.empty() ? (checkpoint.directory() / "config.json").string() : model.source;
  if (!model.experts_per_token)
    fail("{}: no num_experts_per_tok, so the top-k of MoE layer '{}' is unknown; set MoeConfig::top_k", source,
         moe.name);
  const std::optional<bool> renormalize = model.renormalize();
  if (!renormalize)
    fail(
        "{}: no norm_topk_prob and no model_type with a known default ('{}'), so whether MoE layer '{}' "
        "renormalizes its top-k weights is unknown; set MoeConfig::renormalize",
        source, model.model_type, moe.name);
  MoeConfig config;
  config.scheme = moe.scheme;
  config.top_k = *model.experts_per_token;
  config.renormalize = *renormalize;
  config.activation = model.activation();
  return config;
}

MoeLayer MoeLayer::from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer) {
  return from_checkpoint(ctx, checkpoint, layer, MoeConfig::from_checkpoint(checkpoint, layer), MoeLoadOptions{});
}

MoeLayer MoeLayer::from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer,
                                   const MoeConfig& config) {
  return from_checkpoint(ctx, checkpoint, layer, config, MoeLoadOptions{});
}

MoeLayer MoeLayer::from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view layer,
                                   const MoeConfig& config, const MoeLoadOptions& load) {
  const CheckpointLayer& moe = checkpoint.moe_layer(layer);
  if (config.scheme != moe.scheme)
    fail(
        "MoE layer '{}' of checkpoint '{}' is {}, but MoeConfig::scheme is {} (MoeConfig::from_checkpoint gives "
        "the layer's)",
        moe.name, checkpoint.directory().string(), moe.scheme.name(), config.scheme.name());
  const LoadedExperts loaded = checkpoint.load_moe(moe.name, load);
  return create(ctx, loaded.experts, config);
}

}  // namespace fp4cl
