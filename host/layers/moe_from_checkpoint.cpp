// MoeConfig::from_checkpoint, MoeLogitRouting::from_checkpoint and MoeLayer::from_checkpoint: a
// checkpoint's MoE layer, with the routing its config.json (and its gate's correction bias)
// describes, as a layer on the device.
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/model_config.hpp"
#include "fp4cl/moe.hpp"
#include "checkpoint/module_names.hpp"
#include "checkpoint/quantized_module.hpp"
#include "layers/logit_routing_from_checkpoint.hpp"
#include "support/check.hpp"

namespace fp4cl {

MoeLogitRouting detail::logit_routing_of(const Checkpoint& checkpoint, const CheckpointLayer& moe,
                                         const ModelConfig& model) {
  MoeLogitRouting routing = model.logit_routing();
  if (!routing.unsupported.empty() || !model.router_correction_bias()) return routing;
  const std::string source = model.source.empty() ? (checkpoint.directory() / "config.json").string() : model.source;
  const std::string name = detail::beside_experts(moe.name, "gate.e_score_correction_bias");
  const std::optional<TensorView> t = checkpoint.tensors().find(name);
  if (!t) {
    routing.unsupported =
        fmt::format("{} routes with a correction bias, but the checkpoint has no tensor '{}'", source, name);
    return routing;
  }
  if (t->shape() != std::vector<std::int64_t>{moe.num_experts} || (t->dtype() != Dtype::f32 && t->dtype() != Dtype::bf16))
    fail("tensor '{}' in '{}' is {} {}; the router's correction bias must be F32 or BF16 [{}] (one per expert)", name,
         t->file(), dtype_name(t->dtype()), shape_string(t->shape()), moe.num_experts);
  routing.correction_bias = detail::bias_values(*t, fmt::format("MoE layer '{}'", moe.name));
  return routing;
}

MoeLogitRouting MoeLogitRouting::from_checkpoint(const Checkpoint& checkpoint, std::string_view layer) {
  return detail::logit_routing_of(checkpoint, checkpoint.moe_layer(layer), ModelConfig::load(checkpoint.directory()));
}

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
  config.logit_routing = detail::logit_routing_of(checkpoint, moe, model);
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
  if (config.shared_experts != 0 && config.shared_experts != loaded.shared_experts)
    fail("MoE layer '{}': MoeConfig::shared_experts is {}, but the load stacked {} shared experts (set "
         "MoeLoadOptions::shared_experts to fuse the layer's shared expert)",
         moe.name, config.shared_experts, loaded.shared_experts);
  MoeConfig fused = config;
  fused.shared_experts = loaded.shared_experts;
  return create(ctx, loaded.experts, fused);
}

}  // namespace fp4cl
