// fp4cl::Checkpoint: the public face of a discovered model directory, and loading its layers into
// prepared host weights.
#include "fp4cl/checkpoint.hpp"

#include <fmt/format.h>

#include "checkpoint/checkpoint_index.hpp"
#include "checkpoint/module_names.hpp"
#include "prepare/prepare_linear.hpp"
#include "prepare/restack_experts.hpp"
#include "prepare/stack_experts.hpp"
#include "support/check.hpp"

namespace fp4cl {

const char* to_string(LayerKind kind) { return kind == LayerKind::linear ? "linear" : "moe"; }

Checkpoint Checkpoint::open(const std::filesystem::path& dir) { return Checkpoint(detail::discover_checkpoint(dir)); }

const std::filesystem::path& Checkpoint::directory() const { return index_->directory; }
const QuantConfig& Checkpoint::config() const { return index_->config; }
const SafetensorsModel& Checkpoint::tensors() const { return index_->model; }
const std::vector<CheckpointLayer>& Checkpoint::layers() const { return index_->layers; }
const std::vector<UnsupportedModule>& Checkpoint::unsupported_modules() const { return index_->unsupported; }

std::vector<CheckpointLayer> Checkpoint::moe_layers() const {
  std::vector<CheckpointLayer> out;
  for (const CheckpointLayer& l : index_->layers) {
    if (l.kind == LayerKind::moe) out.push_back(l);
  }
  return out;
}

const CheckpointLayer& Checkpoint::layer(std::string_view name) const {
  for (const CheckpointLayer& l : index_->layers) {
    if (l.name == name) return l;
  }
  fail("checkpoint '{}' has no quantized layer '{}' ({} layers: linear modules and MoE layers such as '{}')",
       index_->directory.string(), name, index_->layers.size(),
       index_->layers.empty() ? std::string("none") : index_->layers.front().name);
}

std::vector<std::string> Checkpoint::quantized_modules() const {
  std::vector<std::string> out;
  for (const detail::QuantizedModule& m : index_->modules) out.push_back(m.name);
  return out;
}

LoadedLinear Checkpoint::load_linear(std::string_view module) const {
  if (const detail::QuantizedModule* m = index_->find_module(module))
    return {detail::prepare_linear(*m), m->scheme, detail::module_bias(*m)};
  for (const UnsupportedModule& u : index_->unsupported) {
    if (u.module == module) fail("cannot load module '{}': {}", module, u.reason);
  }
  if (index_->find_moe(module)) {
    fail("'{}' in checkpoint '{}' is an MoE layer, not a linear module: load it with load_moe()", module,
         index_->directory.string());
  }
  std::string tensors;
  for (const std::string& suffix : {std::string("weight"), std::string("weight_packed")}) {
    if (const std::optional<TensorView> t = index_->model.find(TensorLayout::tensor_name(module, suffix))) {
      tensors = fmt::format("; its tensor '{}' is {} {}, not packed FP4 codes with block scales", t->name(),
                            dtype_name(t->dtype()), shape_string(t->shape()));
    }
  }
  fail("checkpoint '{}' has no quantized linear module '{}' ({} quantized modules){}; the config says: {}",
       index_->directory.string(), module, index_->modules.size(), tensors, index_->config.explain(module));
}

namespace {
const detail::MoeLayerIndex& find_moe_or_fail(const detail::CheckpointIndex& index, std::string_view layer) {
  const detail::MoeLayerIndex* m = index.find_moe(layer);
  if (!m) {
    fail(
        "checkpoint '{}' has no MoE layer '{}' (expected an MoE layer name such as '{}', or its decoder layer's "
        "prefix; {} MoE layers)",
        index.directory.string(), layer, index.moe.empty() ? std::string("<none>") : index.moe.front().name,
        index.moe.size());
  }
  return *m;
}

// load_mlp()'s projections "<prefix>.gate_proj", ".up_proj", ".down_proj", checked.
detail::ExpertModules mlp_modules(const detail::CheckpointIndex& index, std::string_view prefix) {
  detail::ExpertModules mlp;
  for (const auto& [field, projection] : {std::pair{&mlp.gate, "gate_proj"}, std::pair{&mlp.up, "up_proj"},
                                          std::pair{&mlp.down, "down_proj"}}) {
    const std::string module = fmt::format("{}.{}", prefix, projection);
    *field = index.find_module(module);
    if (!*field)
      fail("checkpoint '{}' has no quantized linear module '{}' for the MLP '{}' (it needs gate_proj, up_proj and "
           "down_proj); the config says: {}",
           index.directory.string(), module, prefix, index.config.explain(module));
  }
  if (mlp.up->scheme != mlp.gate->scheme || mlp.down->scheme != mlp.gate->scheme)
    fail("the MLP '{}' of checkpoint '{}' mixes schemes: gate_proj {}, up_proj {}, down_proj {}", prefix,
         index.directory.string(), mlp.gate->scheme.name(), mlp.up->scheme.name(), mlp.down->scheme.name());
  return mlp;
}
}  // namespace

const CheckpointLayer& Checkpoint::moe_layer(std::string_view layer) const {
  return this->layer(find_moe_or_fail(*index_, layer).name);
}

LoadedExperts Checkpoint::load_moe(std::string_view layer, const MoeLoadOptions& options) const {
  const detail::MoeLayerIndex& m = find_moe_or_fail(*index_, layer);
  if (m.fused) {
    if (options.shared_experts)
      fail("MoE layer '{}' of checkpoint '{}' stores its experts fused (gpt-oss) and has no shared expert", m.name,
           index_->directory.string());
    return {detail::load_fused_experts(*m.fused), m.fused->scheme};  // MXFP4: no input scales
  }
  if (!options.shared_experts)
    return {detail::stack_experts(m.experts, options.input_scales), m.experts.front().gate->scheme};
  // "<p>.experts" → "<p>.shared_experts", stacked after the routed experts: one expert of the
  // routed experts' intermediate size I, or P of them cut from a shared MLP of P·I (DeepSeek-V2's
  // n_shared_experts = 2). Stacked on its own, so that it keeps its own activation scale where the
  // routed experts share theirs (ExpertInputScales::shared: vLLM runs it as an MLP of its own).
  const std::string shared = detail::beside_experts(m.name, "shared_experts");
  const detail::ExpertModules mlp = mlp_modules(*index_, shared);
  const detail::QuantizedModule& routed = *m.experts.front().gate;
  const std::int64_t wide = mlp.gate->n;
  if (mlp.gate->scheme != routed.scheme || mlp.gate->k != routed.k || wide % routed.n != 0)
    fail("the shared expert '{}' of MoE layer '{}' is {} with hidden size {} and intermediate size {}, the routed "
         "experts {} with {} and {}: fuse only one of their scheme and hidden size whose intermediate size is a "
         "multiple of theirs (load it with load_mlp() and run it as a layer of its own)",
         shared, m.name, mlp.gate->scheme.name(), mlp.gate->k, wide, routed.scheme.name(), routed.k, routed.n);
  const std::int64_t parts = wide / routed.n;
  Fp4Experts experts = detail::stack_experts(m.experts, options.input_scales);
  detail::append_experts(experts,
                         detail::split_intermediate(detail::stack_experts({mlp}, ExpertInputScales::per_expert), parts));
  return {std::move(experts), routed.scheme, static_cast<int>(parts)};
}

LoadedExperts Checkpoint::load_mlp(std::string_view prefix, const MoeLoadOptions& options) const {
  const detail::ExpertModules mlp = mlp_modules(*index_, prefix);
  return {detail::stack_experts({mlp}, options.input_scales), mlp.gate->scheme};
}

LoadedExperts Checkpoint::load_moe(std::size_t index, const MoeLoadOptions& options) const {
  if (index >= index_->moe.size()) {
    fail("checkpoint '{}': MoE layer index {} is out of range (it has {} MoE layers)", index_->directory.string(),
         index, index_->moe.size());
  }
  return load_moe(index_->moe[index].name, options);
}

}  // namespace fp4cl
