// C API: models (fp4cl_model_*): a checkpoint directory opened on a context, and its layers.
#include <memory>
#include <string>

#include "capi/capi_internal.hpp"

using fp4cl::capi::guarded;
using fp4cl::capi::raise;
using fp4cl::capi::require;

namespace fp4cl::capi {

const CheckpointLayer& layer_at(const fp4cl_model& model, std::size_t index) {
  const auto& layers = model.checkpoint.layers();
  if (index >= layers.size())
    raise(FP4CL_ERROR_NOT_FOUND, "layer index {} is out of range: model '{}' has {} quantized layers", index,
          model.checkpoint.directory().string(), layers.size());
  return layers[index];
}

std::size_t find_layer(const fp4cl_model& model, const char* name) {
  require(name, "name");
  const auto& layers = model.checkpoint.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].name == name) return i;
  }
  // An MoE layer may also be named by its decoder layer's prefix ("model.layers.3").
  std::string moe_name;
  try {
    moe_name = model.checkpoint.moe_layer(name).name;
  } catch (const fp4cl::Error&) {
    raise(FP4CL_ERROR_NOT_FOUND,
          "model '{}' has no quantized layer named '{}' ({} layers: linear modules such as "
          "'model.layers.0.self_attn.q_proj' and MoE layers such as 'model.layers.0.mlp.experts' or their prefix "
          "'model.layers.0'; the first is '{}')",
          model.checkpoint.directory().string(), name, layers.size(),
          layers.empty() ? std::string("<none>") : layers.front().name);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].name == moe_name) return i;
  }
  raise(FP4CL_ERROR_INTERNAL, "MoE layer '{}' is not among the model's layers", moe_name);
}

}  // namespace fp4cl::capi

extern "C" {

fp4cl_status fp4cl_model_open(fp4cl_context* ctx, const char* directory, fp4cl_model** out) {
  return guarded("fp4cl_model_open", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(ctx, "ctx");
    require(directory, "directory");
    require(out, "out");
    if (*directory == '\0') raise(FP4CL_ERROR_INVALID_ARGUMENT, "directory is empty");
    fp4cl::Checkpoint checkpoint = fp4cl::Checkpoint::open(directory);
    fp4cl::ModelConfig config = fp4cl::ModelConfig::load(directory);
    auto handle = std::make_unique<fp4cl_model>(fp4cl_model{ctx->ctx, std::move(checkpoint), std::move(config)});
    *out = handle.release();
  });
}

void fp4cl_model_release(fp4cl_model* model) { delete model; }

fp4cl_status fp4cl_model_layer_count(const fp4cl_model* model, size_t* count) {
  return guarded("fp4cl_model_layer_count", FP4CL_ERROR_INTERNAL, [&] {
    require(model, "model");
    require(count, "count");
    *count = model->checkpoint.layers().size();
  });
}

fp4cl_status fp4cl_model_layer_info(const fp4cl_model* model, size_t index, fp4cl_layer_info* info) {
  return guarded("fp4cl_model_layer_info", FP4CL_ERROR_INTERNAL, [&] {
    require(model, "model");
    require(info, "info");
    const fp4cl::CheckpointLayer& l = fp4cl::capi::layer_at(*model, index);
    fp4cl_layer_info i{};
    i.name = l.name.c_str();
    const bool moe = l.kind == fp4cl::LayerKind::moe;
    i.kind = moe ? FP4CL_LAYER_MOE : FP4CL_LAYER_LINEAR;
    i.weight_format = l.scheme.weight == fp4cl::WeightFormat::nvfp4 ? FP4CL_WEIGHT_NVFP4 : FP4CL_WEIGHT_MXFP4;
    i.activations = l.scheme.w4a16() ? FP4CL_ACTIVATIONS_BF16 : FP4CL_ACTIVATIONS_FP4;
    i.top_k = moe ? model->config.experts_per_token.value_or(0) : 0;
    if (moe) {
      i.num_experts = l.num_experts;
      i.hidden = l.hidden;
      i.intermediate = l.intermediate;
    } else {
      i.out_features = l.out_features;
      i.in_features = l.in_features;
    }
    *info = i;
  });
}

fp4cl_status fp4cl_model_find_layer(const fp4cl_model* model, const char* name, size_t* index) {
  return guarded("fp4cl_model_find_layer", FP4CL_ERROR_INTERNAL, [&] {
    require(model, "model");
    require(index, "index");
    *index = fp4cl::capi::find_layer(*model, name);
  });
}

}  // extern "C"
