// C API: MoE layers (fp4cl_moe_*).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.hpp"
#include "checkpoint/module_names.hpp"
#include "cl/opencl_calls.hpp"
#include "layers/logit_routing_from_checkpoint.hpp"

using fp4cl::capi::guarded;
using fp4cl::capi::raise;
using fp4cl::capi::require;

namespace {

fp4cl::MoeConfig moe_config(const fp4cl_model& model, const fp4cl::CheckpointLayer& layer,
                            const fp4cl_moe_options* options) {
  fp4cl_moe_options o;
  fp4cl_moe_options_init(&o);
  if (options) o = *options;
  fp4cl::MoeConfig config;
  config.scheme = layer.scheme;
  fp4cl::capi::check_capacity_and_output(o.max_tokens, o.output);
  config.max_tokens = o.max_tokens;
  config.output = o.output == FP4CL_DTYPE_BF16 ? fp4cl::MoeOutput::bf16 : fp4cl::MoeOutput::fp32;

  const std::string source = model.config.source.empty()
                                 ? (model.checkpoint.directory() / "config.json").string()
                                 : model.config.source;
  if (o.expert_map) {
    if (o.expert_map_size == 0)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->expert_map is given but options->expert_map_size is 0");
    for (std::size_t g = 0; g < o.expert_map_size; ++g) {
      const std::int32_t local = o.expert_map[g];
      if (local < -1 || local >= layer.num_experts)
        raise(FP4CL_ERROR_INVALID_ARGUMENT,
              "options->expert_map[{}] = {}: must be -1 (another rank) or a local expert in [0, {}) of layer '{}'", g,
              local, layer.num_experts, layer.name);
    }
    config.expert_map.assign(o.expert_map, o.expert_map + o.expert_map_size);
  } else if (o.expert_map_size != 0) {
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->expert_map_size = {} but options->expert_map is NULL",
          o.expert_map_size);
  }
  const std::int64_t global_experts = o.expert_map ? static_cast<std::int64_t>(o.expert_map_size) : layer.num_experts;

  if (o.top_k == 0) {
    if (!model.config.experts_per_token)
      raise(FP4CL_ERROR_INVALID_MODEL,
            "{}: no num_experts_per_tok, so the top-k of MoE layer '{}' is unknown; set fp4cl_moe_options.top_k",
            source, layer.name);
    config.top_k = *model.config.experts_per_token;
  } else {
    config.top_k = o.top_k;
  }
  if (config.top_k < 1 || config.top_k > global_experts)
    raise(o.top_k == 0 ? FP4CL_ERROR_INVALID_MODEL : FP4CL_ERROR_INVALID_ARGUMENT,
          "top_k = {} (from {}) must be in [1, {}] (the number of global experts)", config.top_k,
          o.top_k == 0 ? source : std::string("options->top_k"), global_experts);

  if (o.renormalize == -1) {
    const std::optional<bool> r = model.config.renormalize();
    if (!r)
      raise(FP4CL_ERROR_INVALID_MODEL,
            "{}: no norm_topk_prob and no model_type with a known default ('{}'), so whether MoE layer '{}' "
            "renormalizes its top-k weights is unknown; set fp4cl_moe_options.renormalize to 0 or 1",
            source, model.config.model_type, layer.name);
    config.renormalize = *r;
  } else if (o.renormalize == 0 || o.renormalize == 1) {
    config.renormalize = o.renormalize == 1;
  } else {
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->renormalize = {}: must be -1 (config.json), 0 or 1", o.renormalize);
  }
  if (o.batch_invariant != 0 && o.batch_invariant != 1)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->batch_invariant = {}: must be 0 or 1", o.batch_invariant);
  config.batch_invariant = o.batch_invariant == 1;
  config.activation = model.config.activation();  // config.json: gpt-oss's clamped SwiGLU, else SwiGLU
  // config.json's gate (DeepSeek's, GLM-4.5's: sigmoid, groups, the checkpoint's correction bias,
  // scaling), or why router logits cannot be routed (fp4cl_moe_enqueue_logits then fails with it).
  config.logit_routing = fp4cl::detail::logit_routing_of(model.checkpoint, layer, model.config);
  return config;
}

// The caller's activation (fp4cl_model_get_moe_with_activation), checked.
fp4cl::MoeActivation activation_of(const fp4cl_moe_activation& a) {
  fp4cl::MoeActivation out;
  if (a.kind == FP4CL_MOE_ACTIVATION_SWIGLU) {
    if (a.alpha != 0.0f || a.limit != 0.0f)
      raise(FP4CL_ERROR_INVALID_ARGUMENT,
            "activation->alpha = {}, activation->limit = {}: SWIGLU takes neither (both 0); alpha and limit belong "
            "to FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED",
            a.alpha, a.limit);
    return out;
  }
  if (a.kind != FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED)
    raise(FP4CL_ERROR_INVALID_ARGUMENT,
          "activation->kind = {}: must be FP4CL_MOE_ACTIVATION_SWIGLU (0) or FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED (1)",
          a.kind);
  for (const auto& [name, value] : {std::pair<const char*, float>{"alpha", a.alpha}, {"limit", a.limit}})
    if (!(std::isfinite(value) && value > 0.0f))
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "activation->{} = {}: SWIGLU_CLAMPED takes a finite value above 0", name,
            value);
  out.kind = fp4cl::MoeActivation::Kind::swiglu_clamped;
  out.alpha = a.alpha;
  out.limit = a.limit;
  return out;
}

// shared_experts: the layer's shared expert fused (fp4cl_model_get_moe_with_shared_experts).
void create_moe(fp4cl_model* model, const fp4cl::CheckpointLayer& layer, const fp4cl_moe_options* options,
                fp4cl_moe** out, const fp4cl_moe_activation* activation = nullptr, bool shared_experts = false) {
  if (layer.kind != fp4cl::LayerKind::moe)
    raise(FP4CL_ERROR_NOT_FOUND, "'{}' is a linear layer, not an MoE layer (use fp4cl_model_get_linear)", layer.name);
  fp4cl::MoeConfig config = moe_config(*model, layer, options);
  if (activation) config.activation = activation_of(*activation);
  fp4cl::MoeLoadOptions load;
  if (shared_experts) {
    if (!config.expert_map.empty())
      raise(FP4CL_ERROR_INVALID_ARGUMENT,
            "options->expert_map with the shared experts fused: every rank would add them (fuse them on one rank "
            "only, or run them as a layer of their own: fp4cl_model_get_mlp)");
    const std::string shared = fp4cl::detail::beside_experts(layer.name, "shared_experts");
    const std::vector<std::string> modules = model->checkpoint.quantized_modules();
    if (std::find(modules.begin(), modules.end(), shared + ".gate_proj") == modules.end())
      raise(FP4CL_ERROR_NOT_FOUND, "MoE layer '{}' has no shared expert to fuse (no quantized module '{}.gate_proj')",
            layer.name, shared);
    load.shared_experts = true;
  }
  fp4cl::MoeLayer moe = fp4cl::MoeLayer::from_checkpoint(model->ctx, model->checkpoint, layer.name, config, load);
  config.shared_experts = moe.shared_experts();
  auto handle = std::unique_ptr<fp4cl_moe>(new fp4cl_moe{model->ctx, std::move(moe), config, std::nullopt, {}, {}, {}, {}});
  *out = handle.release();
}

std::size_t output_bytes(const fp4cl_moe& layer) { return layer.config.output == fp4cl::MoeOutput::bf16 ? 2 : 4; }

void check_tokens(std::int64_t tokens) {
  if (tokens < 0) raise(FP4CL_ERROR_INVALID_ARGUMENT, "tokens = {}: must be at least 0", tokens);
  if (tokens > INT32_MAX) raise(FP4CL_ERROR_INVALID_ARGUMENT, "tokens = {}: must be below 2^31", tokens);
}

// The host arrays every host-pointer call passes (routing aside), checked and staged.
struct HostCall {
  std::size_t x_bytes = 0, out_bytes = 0;
};

HostCall check_host_arrays(const fp4cl_moe& layer, const uint16_t* x, size_t x_bytes, int64_t tokens, void* out,
                           size_t out_bytes) {
  require(x, "x");
  require(out, "out");
  const fp4cl::MoeLayer& l = layer.layer;
  HostCall c;
  c.x_bytes = fp4cl::capi::checked_bytes(tokens * l.hidden(), 2, "x");
  c.out_bytes = fp4cl::capi::checked_bytes(tokens * l.hidden(), output_bytes(layer), "out");
  fp4cl::capi::require_bytes("x", x_bytes, c.x_bytes, fmt::format("[T, H] = [{}, {}] BF16", tokens, l.hidden()));
  fp4cl::capi::require_bytes(
      "out", out_bytes, c.out_bytes,
      fmt::format("[T, H] = [{}, {}] {}", tokens, l.hidden(), output_bytes(layer) == 2 ? "BF16" : "fp32"));
  return c;
}

void write(const fp4cl::Context& ctx, const cl::Buffer& b, const void* data, std::size_t bytes, const char* what) {
  fp4cl::capi::check(fp4cl::opencl::enqueue_write(ctx.queue(), b, true, 0, bytes, data, nullptr, nullptr), what);
}

void run_and_read(fp4cl_moe& layer, const fp4cl::MoeCall& call, void* out, std::size_t out_bytes) {
  layer.last_call.reset();
  layer.layer.finish(call);
  fp4cl::capi::check(
      fp4cl::opencl::enqueue_read(layer.ctx.queue(), layer.out.buffer, true, 0, out_bytes, out, nullptr, nullptr),
      "reading out");
}

}  // namespace

extern "C" {

void fp4cl_moe_options_init(fp4cl_moe_options* options) {
  if (!options) return;
  *options = fp4cl_moe_options{};
  options->max_tokens = 256;
  options->output = FP4CL_DTYPE_BF16;
  options->top_k = 0;
  options->renormalize = -1;
  options->expert_map = nullptr;
  options->expert_map_size = 0;
  options->batch_invariant = 0;
}

fp4cl_status fp4cl_model_get_moe(fp4cl_model* model, const char* name, const fp4cl_moe_options* options,
                                 fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    const std::size_t index = fp4cl::capi::find_layer(*model, name);
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out);
  });
}

fp4cl_status fp4cl_model_get_moe_at(fp4cl_model* model, size_t index, const fp4cl_moe_options* options,
                                    fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe_at", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out);
  });
}

fp4cl_status fp4cl_model_get_mlp(fp4cl_model* model, const char* prefix, const fp4cl_moe_options* options,
                                 fp4cl_moe** out) {
  return guarded("fp4cl_model_get_mlp", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(prefix, "prefix");
    require(out, "out");
    fp4cl_moe_options o;
    fp4cl_moe_options_init(&o);
    if (options) o = *options;
    fp4cl::capi::check_capacity_and_output(o.max_tokens, o.output);
    if (o.top_k != 0 && o.top_k != 1)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->top_k = {}: an MLP is one expert, k = 1 (or 0)", o.top_k);
    if (o.renormalize != -1)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->renormalize = {}: an MLP has no router (leave it -1)",
            o.renormalize);
    if (o.expert_map || o.expert_map_size)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->expert_map: an MLP has no experts to map (leave it NULL)");
    if (o.batch_invariant != 0 && o.batch_invariant != 1)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->batch_invariant = {}: must be 0 or 1", o.batch_invariant);
    fp4cl::LoadedExperts loaded;
    try {
      loaded = model->checkpoint.load_mlp(prefix);
    } catch (const fp4cl::Error& e) {
      raise(FP4CL_ERROR_NOT_FOUND, "{}", e.what());
    }
    fp4cl::MoeConfig config;
    config.scheme = loaded.scheme;
    config.top_k = 1;
    config.renormalize = false;
    config.max_tokens = o.max_tokens;
    config.output = o.output == FP4CL_DTYPE_BF16 ? fp4cl::MoeOutput::bf16 : fp4cl::MoeOutput::fp32;
    config.batch_invariant = o.batch_invariant == 1;
    config.logit_routing.unsupported = fmt::format("'{}' is an MLP: pass topk_ids 0 and topk_weights 1", prefix);
    fp4cl::MoeLayer moe = fp4cl::MoeLayer::create(model->ctx, loaded.experts, config);
    auto handle =
        std::unique_ptr<fp4cl_moe>(new fp4cl_moe{model->ctx, std::move(moe), config, std::nullopt, {}, {}, {}, {}});
    *out = handle.release();
  });
}

fp4cl_status fp4cl_model_get_moe_with_activation(fp4cl_model* model, const char* name, const fp4cl_moe_options* options,
                                                 const fp4cl_moe_activation* activation, fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe_with_activation", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    const std::size_t index = fp4cl::capi::find_layer(*model, name);
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out, activation);
  });
}

fp4cl_status fp4cl_model_get_moe_at_with_activation(fp4cl_model* model, size_t index,
                                                    const fp4cl_moe_options* options,
                                                    const fp4cl_moe_activation* activation, fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe_at_with_activation", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out, activation);
  });
}

fp4cl_status fp4cl_model_get_moe_with_shared_experts(fp4cl_model* model, const char* name,
                                                     const fp4cl_moe_options* options,
                                                     const fp4cl_moe_activation* activation, fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe_with_shared_experts", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    const std::size_t index = fp4cl::capi::find_layer(*model, name);
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out, activation, true);
  });
}

fp4cl_status fp4cl_model_get_moe_at_with_shared_experts(fp4cl_model* model, size_t index,
                                                        const fp4cl_moe_options* options,
                                                        const fp4cl_moe_activation* activation, fp4cl_moe** out) {
  return guarded("fp4cl_model_get_moe_at_with_shared_experts", FP4CL_ERROR_INVALID_MODEL, [&] {
    require(model, "model");
    require(out, "out");
    create_moe(model, fp4cl::capi::layer_at(*model, index), options, out, activation, true);
  });
}

void fp4cl_moe_release(fp4cl_moe* layer) { delete layer; }

fp4cl_status fp4cl_moe_get_shared_experts(const fp4cl_moe* layer, int32_t* count) {
  return guarded("fp4cl_moe_get_shared_experts", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    require(count, "count");
    *count = layer->layer.shared_experts();
  });
}

fp4cl_status fp4cl_moe_get_info(const fp4cl_moe* layer, fp4cl_moe_info* info) {
  return guarded("fp4cl_moe_get_info", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    require(info, "info");
    const fp4cl::MoeLayer& l = layer->layer;
    fp4cl_moe_info i{};
    i.num_experts = l.num_global_experts();
    i.num_local_experts = l.num_local_experts();
    i.hidden = l.hidden();
    i.intermediate = l.intermediate();
    i.max_tokens = l.max_tokens();
    i.top_k = l.top_k();
    i.weight_format = l.scheme().weight == fp4cl::WeightFormat::nvfp4 ? FP4CL_WEIGHT_NVFP4 : FP4CL_WEIGHT_MXFP4;
    i.activations = l.scheme().w4a16() ? FP4CL_ACTIVATIONS_BF16 : FP4CL_ACTIVATIONS_FP4;
    i.output = layer->config.output == fp4cl::MoeOutput::bf16 ? FP4CL_DTYPE_BF16 : FP4CL_DTYPE_FP32;
    *info = i;
  });
}

fp4cl_status fp4cl_moe_get_activation(const fp4cl_moe* layer, fp4cl_moe_activation* activation) {
  return guarded("fp4cl_moe_get_activation", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    require(activation, "activation");
    const fp4cl::MoeActivation& a = layer->config.activation;
    fp4cl_moe_activation out{};
    if (a.kind == fp4cl::MoeActivation::Kind::swiglu_clamped) {
      out.kind = FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED;
      out.alpha = a.alpha;
      out.limit = a.limit;
    } else {
      out.kind = FP4CL_MOE_ACTIVATION_SWIGLU;
    }
    *activation = out;
  });
}

fp4cl_status fp4cl_moe_get_routing(const fp4cl_moe* layer, fp4cl_moe_routing* routing) {
  return guarded("fp4cl_moe_get_routing", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    require(routing, "routing");
    const fp4cl::MoeLogitRouting& r = layer->config.logit_routing;
    fp4cl_moe_routing out{};
    out.logits = r.unsupported.empty() ? 1 : 0;
    out.scoring = r.scoring == fp4cl::MoeLogitRouting::Scoring::sigmoid ? FP4CL_MOE_SCORING_SIGMOID
                                                                        : FP4CL_MOE_SCORING_SOFTMAX;
    out.groups = r.groups;
    out.top_groups = r.top_groups;
    out.correction_bias = r.correction_bias.empty() ? 0 : 1;
    out.renormalize = layer->config.renormalize ? 1 : 0;
    out.scaling_factor = r.scaling_factor;
    *routing = out;
  });
}

fp4cl_status fp4cl_moe_describe_kernel(const fp4cl_moe* layer, int64_t tokens, char* buffer, size_t size,
                                       size_t* length) {
  return guarded("fp4cl_moe_describe_kernel", FP4CL_ERROR_INTERNAL, [&] {
    require(layer, "layer");
    if (tokens < 1 || tokens > INT32_MAX)
      raise(FP4CL_ERROR_INVALID_ARGUMENT, "tokens = {}: must be 1 to 2^31 - 1", tokens);
    fp4cl::capi::copy_text(layer->layer.kernel_description(tokens), buffer, size, length);
  });
}

fp4cl_status fp4cl_moe_enqueue(fp4cl_moe* layer, cl_mem x, cl_mem topk_ids, cl_mem topk_weights, cl_mem out,
                               int64_t tokens, cl_uint num_wait, const cl_event* wait_list, cl_event* done) {
  return guarded("fp4cl_moe_enqueue", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    check_tokens(tokens);
    const cl::Buffer xb = fp4cl::capi::wrap_buffer(layer->ctx, x, "x");
    const cl::Buffer ids = fp4cl::capi::wrap_buffer(layer->ctx, topk_ids, "topk_ids");
    const cl::Buffer weights = fp4cl::capi::wrap_buffer(layer->ctx, topk_weights, "topk_weights");
    const cl::Buffer ob = fp4cl::capi::wrap_buffer(layer->ctx, out, "out");
    const std::vector<cl::Event> wait = fp4cl::capi::wrap_wait_list(num_wait, wait_list);
    layer->last_call.reset();
    fp4cl::MoeCall call = layer->layer.enqueue_topk(xb, ids, weights, ob, tokens, wait);
    fp4cl::capi::hand_out_event(layer->ctx, call.done, wait, done);
    layer->last_call = std::move(call);
  });
}

fp4cl_status fp4cl_moe_enqueue_logits(fp4cl_moe* layer, cl_mem x, cl_mem router_logits, cl_mem out, int64_t tokens,
                                      cl_uint num_wait, const cl_event* wait_list, cl_event* done) {
  return guarded("fp4cl_moe_enqueue_logits", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    check_tokens(tokens);
    const cl::Buffer xb = fp4cl::capi::wrap_buffer(layer->ctx, x, "x");
    const cl::Buffer logits = fp4cl::capi::wrap_buffer(layer->ctx, router_logits, "router_logits");
    const cl::Buffer ob = fp4cl::capi::wrap_buffer(layer->ctx, out, "out");
    const std::vector<cl::Event> wait = fp4cl::capi::wrap_wait_list(num_wait, wait_list);
    layer->last_call.reset();
    fp4cl::MoeCall call = layer->layer.enqueue_logits(xb, logits, ob, tokens, wait);
    fp4cl::capi::hand_out_event(layer->ctx, call.done, wait, done);
    layer->last_call = std::move(call);
  });
}

fp4cl_status fp4cl_moe_finish(fp4cl_moe* layer) {
  return guarded("fp4cl_moe_finish", FP4CL_ERROR_INVALID_EXPERT_ID, [&] {
    require(layer, "layer");
    if (!layer->last_call) return;
    const fp4cl::MoeCall call = std::move(*layer->last_call);
    layer->last_call.reset();
    layer->layer.finish(call);
  });
}

fp4cl_status fp4cl_moe_run(fp4cl_moe* layer, const uint16_t* x, size_t x_bytes, const int32_t* topk_ids,
                           size_t topk_ids_bytes, const float* topk_weights, size_t topk_weights_bytes,
                           int64_t tokens, void* out, size_t out_bytes) {
  return guarded("fp4cl_moe_run", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    check_tokens(tokens);
    if (tokens == 0) return;
    const HostCall c = check_host_arrays(*layer, x, x_bytes, tokens, out, out_bytes);
    require(topk_ids, "topk_ids");
    require(topk_weights, "topk_weights");
    const fp4cl::MoeLayer& l = layer->layer;
    const int k = l.top_k();
    const std::size_t pair_bytes = fp4cl::capi::checked_bytes(tokens * k, 4, "topk_ids");
    const std::string pairs = fmt::format("[T, k] = [{}, {}]", tokens, k);
    fp4cl::capi::require_bytes("topk_ids", topk_ids_bytes, pair_bytes, pairs + " int32");
    fp4cl::capi::require_bytes("topk_weights", topk_weights_bytes, pair_bytes, pairs + " fp32");
    const std::int64_t global = l.num_global_experts();
    for (std::int64_t p = 0; p < tokens * k; ++p) {
      if (topk_ids[p] < 0 || topk_ids[p] >= global)
        raise(FP4CL_ERROR_INVALID_EXPERT_ID, "topk_ids[{}, {}] = {} is outside [0, {}) (the number of global experts)",
              p / k, p % k, topk_ids[p], global);
    }
    const fp4cl::Context& ctx = layer->ctx;
    const cl::Buffer& xb = fp4cl::capi::staging_for(ctx, layer->x, c.x_bytes, "x");
    const cl::Buffer& ids = fp4cl::capi::staging_for(ctx, layer->routing_a, pair_bytes, "topk_ids");
    const cl::Buffer& weights = fp4cl::capi::staging_for(ctx, layer->routing_b, pair_bytes, "topk_weights");
    const cl::Buffer& ob = fp4cl::capi::staging_for(ctx, layer->out, c.out_bytes, "out");
    write(ctx, xb, x, c.x_bytes, "writing x");
    write(ctx, ids, topk_ids, pair_bytes, "writing topk_ids");
    write(ctx, weights, topk_weights, pair_bytes, "writing topk_weights");
    run_and_read(*layer, layer->layer.enqueue_topk(xb, ids, weights, ob, tokens), out, c.out_bytes);
  });
}

fp4cl_status fp4cl_moe_run_logits(fp4cl_moe* layer, const uint16_t* x, size_t x_bytes, const float* router_logits,
                                  size_t router_logits_bytes, int64_t tokens, void* out, size_t out_bytes) {
  return guarded("fp4cl_moe_run_logits", FP4CL_ERROR_INVALID_ARGUMENT, [&] {
    require(layer, "layer");
    check_tokens(tokens);
    if (tokens == 0) return;
    const HostCall c = check_host_arrays(*layer, x, x_bytes, tokens, out, out_bytes);
    require(router_logits, "router_logits");
    const fp4cl::MoeLayer& l = layer->layer;
    const std::size_t logit_bytes =
        fp4cl::capi::checked_bytes(tokens * l.num_global_experts(), 4, "router_logits");
    fp4cl::capi::require_bytes("router_logits", router_logits_bytes, logit_bytes,
                               fmt::format("[T, E_global] = [{}, {}] fp32", tokens, l.num_global_experts()));
    const fp4cl::Context& ctx = layer->ctx;
    const cl::Buffer& xb = fp4cl::capi::staging_for(ctx, layer->x, c.x_bytes, "x");
    const cl::Buffer& logits = fp4cl::capi::staging_for(ctx, layer->routing_a, logit_bytes, "router_logits");
    const cl::Buffer& ob = fp4cl::capi::staging_for(ctx, layer->out, c.out_bytes, "out");
    write(ctx, xb, x, c.x_bytes, "writing x");
    write(ctx, logits, router_logits, logit_bytes, "writing router_logits");
    run_and_read(*layer, layer->layer.enqueue_logits(xb, logits, ob, tokens), out, c.out_bytes);
  });
}

}  // extern "C"
