// `fp4cl run DIR --layer NAME --input IN.safetensors --output OUT.safetensors`: runs one quantized
// layer of a checkpoint — a linear module or an MoE layer — on the default OpenCL device, on
// inputs read from a safetensors file, and writes its output `y`:
//   linear: x [T, in_features] (BF16, or F32 rounded to BF16)          → y [T, out_features]
//   MoE:    x [T, H] and router_logits [T, E] (F32 or BF16), or
//           topk_ids [T, k] (I32 or I64) with topk_weights [T, k]        → y [T, H]
// The top-k and renormalization of the logit path default to config.json's num_experts_per_tok
// and norm_topk_prob, FC1's activation to config.json's (--activation, --swiglu-alpha,
// --swiglu-limit choose it). --check compares every output with the scalar reference's bound.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/model_config.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "layer_inputs.hpp"
#include "layer_runs.hpp"
#include "support/check.hpp"

namespace fp4cl::cli {

namespace {

struct RunArgs {
  std::string dir, layer, input, output;
  std::optional<int> top_k;
  bool renormalize = false, no_renormalize = false;
  std::string output_dtype = "bf16";
  bool check = false;
  std::string activation;  // "" (config.json's), "swiglu" or "swiglu_clamped"
  std::optional<float> swiglu_alpha, swiglu_limit;
  bool shared_experts = false;  // fuse the MoE layer's "<p>.shared_experts" (MoeLoadOptions::shared_experts)
};

// FC1's activation: config.json's unless --activation chooses one.
MoeActivation activation_of(const RunArgs& a, const ModelConfig& model) {
  if (a.activation.empty()) {
    if (a.swiglu_alpha || a.swiglu_limit) fail("--swiglu-alpha / --swiglu-limit need --activation swiglu_clamped");
    return model.activation();
  }
  if (a.activation == "swiglu") {
    if (a.swiglu_alpha || a.swiglu_limit)
      fail("--activation swiglu takes no --swiglu-alpha or --swiglu-limit (those are swiglu_clamped's)");
    return {};
  }
  MoeActivation clamped = MoeActivation::gpt_oss();
  clamped.alpha = a.swiglu_alpha.value_or(clamped.alpha);
  clamped.limit = a.swiglu_limit.value_or(clamped.limit);
  for (const auto& [name, value] : {std::pair<const char*, float>{"--swiglu-alpha", clamped.alpha},
                                    {"--swiglu-limit", clamped.limit}})
    if (!(std::isfinite(value) && value > 0.0f)) fail("{} {}: must be finite and above 0", name, value);
  return clamped;
}

// The decoder layer of an MoE layer "<decoder layer>.<block>.experts" ("model.layers.0.mlp.experts"
// → "model.layers.0"), or "" for another name.
std::string decoder_layer_of(const std::string& moe_name) {
  const std::size_t experts = moe_name.rfind('.');
  if (experts == std::string::npos || experts == 0) return "";
  const std::size_t block = moe_name.rfind('.', experts - 1);
  return block == std::string::npos ? "" : moe_name.substr(0, block);
}

// The MoE layer `name` names: its own name or its decoder layer's.
std::optional<CheckpointLayer> moe_layer_named(const Checkpoint& ckpt, const std::string& name) {
  for (const CheckpointLayer& l : ckpt.moe_layers()) {
    if (l.name == name || decoder_layer_of(l.name) == name) return ckpt.moe_layer(name);
  }
  return std::nullopt;
}

[[noreturn]] void unknown_layer(const Checkpoint& ckpt, const std::string& name) {
  // A module the checkpoint has but does not quantize (or cannot run): the loader says why.
  if (ckpt.tensors().contains(name + ".weight")) ckpt.load_linear(name);
  std::vector<std::string> some;
  for (const CheckpointLayer& l : ckpt.layers()) {
    if (some.size() == 6) break;
    some.push_back(l.kind == LayerKind::moe ? l.name + " (MoE)" : l.name);
  }
  fail("checkpoint '{}' has no quantized layer '{}'; its {} layers include {}{} (`fp4cl inspect {}` lists them)",
       ckpt.directory().string(), name, ckpt.layers().size(), fmt::join(some, ", "),
       ckpt.layers().size() > some.size() ? ", ..." : "", ckpt.directory().string());
}

void write_output(const RunArgs& a, const std::string& layer, const QuantScheme& scheme, const LayerOutput& y,
                  std::int64_t rows, std::int64_t cols) {
  SafetensorsWriter writer;
  if (y.bf16) {
    writer.add("y", Dtype::bf16, {rows, cols}, y.bf16_bits.data(), y.bf16_bits.size() * 2);
  } else {
    writer.add("y", Dtype::f32, {rows, cols}, y.f32.data(), y.f32.size() * 4);
  }
  writer.set_metadata("fp4cl.layer", layer).set_metadata("fp4cl.scheme", scheme.name());
  writer.write(a.output);
  fmt::print("wrote y [{}, {}] {} to {}\n", rows, cols, y.bf16 ? "BF16" : "F32", a.output);
}

void report_unread(const LayerInputs& in) {
  const std::vector<std::string> unread = in.unread();
  if (!unread.empty()) fmt::print("note: not used from {}: {}\n", in.path(), fmt::join(unread, ", "));
}

// Passes when every output is within the reference's bound, else throws after the report.
void report_check(const CheckResult& r) {
  fmt::print("check against the scalar reference: {}\n", describe(r));
  if (!r.ok()) throw CLI::RuntimeError(1);
}

void run_linear_layer(const RunArgs& a, const Context& ctx, const Checkpoint& ckpt, LayerInputs& in) {
  const LoadedLinear loaded = ckpt.load_linear(a.layer);
  const Fp4Weight& w = loaded.weight;
  std::int64_t tokens = -1;
  const std::vector<std::uint16_t> x =
      in.bf16_matrix("x", tokens, w.k, fmt::format("the activations [T, in_features = {}] of {}", w.k, a.layer));
  report_unread(in);
  LinearOptions options;
  options.max_tokens = std::max<std::int64_t>(tokens, 1);
  options.output = a.output_dtype == "bf16" ? OutputType::bf16 : OutputType::fp32;
  options.bias = loaded.bias;
  Linear layer = Linear::create(ctx, w, loaded.scheme, options);
  fmt::print("layer {}: linear [{}, {}], {}, kernel {}\n", a.layer, w.n, w.k, loaded.scheme.name(),
             layer.kernel_description(std::max<std::int64_t>(tokens, 1)));
  const LayerOutput y = run_linear(layer, x, tokens);
  fmt::print("ran {} tokens on {}\n", tokens, ctx.info().name);
  write_output(a, a.layer, loaded.scheme, y, tokens, w.n);
  if (a.check) report_check(check_linear(loaded.scheme, w, x, tokens, y, loaded.bias));
}

// Routing from router_logits [T, E]: top-k and renormalization from the options, else config.json.
MoeRoutingInput logits_routing(const RunArgs& a, const ModelConfig& model, const std::string& config_json,
                               const Checkpoint& ckpt, LayerInputs& in, const CheckpointLayer& l, std::int64_t tokens, MoeConfig& config,
                               std::string& description) {
  if (in.has("topk_ids") || in.has("topk_weights"))
    fail("{}: give either router_logits or topk_ids with topk_weights, not both", in.path());
  config.logit_routing = MoeLogitRouting::from_checkpoint(ckpt, l.name);
  if (!config.logit_routing.unsupported.empty())
    fail("{}; pass topk_ids and topk_weights instead of router_logits", config.logit_routing.unsupported);
  MoeRoutingInput routing;
  routing.router_logits =
      in.f32_matrix("router_logits", tokens, l.num_experts,
                    fmt::format("the router logits [T, experts = {}] of {}", l.num_experts, l.name));
  if (!a.top_k && !model.experts_per_token)
    fail("{} has no num_experts_per_tok: give the layer's top-k with --topk", config_json);
  config.top_k = a.top_k ? *a.top_k : *model.experts_per_token;
  if (!a.renormalize && !a.no_renormalize && !model.renormalize())
    fail(
        "{} says neither norm_topk_prob nor a model_type with a known default: give --renormalize or "
        "--no-renormalize",
        config_json);
  config.renormalize = a.renormalize || (!a.no_renormalize && *model.renormalize());
  description = fmt::format("router logits ({}), top-{}{}{}", describe(config.logit_routing), config.top_k,
                            a.top_k ? "" : " (config.json)", config.renormalize ? ", renormalized" : ", not renormalized");
  return routing;
}

// Routing from topk_ids and topk_weights [T, k], used as given.
MoeRoutingInput topk_routing(const RunArgs& a, LayerInputs& in, const CheckpointLayer& l, std::int64_t tokens,
                             MoeConfig& config, std::string& description) {
  if (!in.has("topk_ids"))
    fail("{}: no routing for MoE layer '{}': expected router_logits [T, {}], or topk_ids and topk_weights [T, k]",
         in.path(), l.name, l.num_experts);
  if (a.renormalize || a.no_renormalize)
    fail("--renormalize / --no-renormalize apply to router logits; {} gives topk_weights, which are used as given",
         in.path());
  // k is what topk_ids says; a tensor of another rank is refused below, naming its shape.
  const std::vector<std::int64_t> ids_shape = *in.shape("topk_ids");
  const std::int64_t k = ids_shape.size() == 2 ? ids_shape[1] : a.top_k.value_or(1);
  if (a.top_k && *a.top_k != k) fail("{}: topk_ids has {} columns but --topk is {}", in.path(), k, *a.top_k);
  MoeRoutingInput routing;
  routing.from_logits = false;
  routing.topk_ids = in.i32_matrix("topk_ids", tokens, k, fmt::format("the expert ids [T, k] of {}", l.name));
  routing.topk_weights = in.f32_matrix("topk_weights", tokens, k, fmt::format("the routing weights [T, k = {}]", k));
  config.top_k = static_cast<int>(k);
  description = fmt::format("topk_ids and topk_weights, k = {}", k);
  return routing;
}

void run_moe_layer(const RunArgs& a, const Context& ctx, const Checkpoint& ckpt, const CheckpointLayer& l,
                   LayerInputs& in) {
  const ModelConfig model = ModelConfig::load(ckpt.directory());
  const std::string config_json = model.source.empty() ? "config.json (absent)" : model.source;
  std::int64_t tokens = -1;
  const std::vector<std::uint16_t> x =
      in.bf16_matrix("x", tokens, l.hidden, fmt::format("the activations [T, hidden = {}] of {}", l.hidden, l.name));
  MoeConfig config;
  config.scheme = l.scheme;
  config.max_tokens = std::max<std::int64_t>(tokens, 1);
  config.output = a.output_dtype == "bf16" ? MoeOutput::bf16 : MoeOutput::fp32;
  config.activation = activation_of(a, model);  // config.json: gpt-oss's clamped SwiGLU, else SwiGLU
  std::string routing_text;
  const MoeRoutingInput routing = in.has("router_logits")
                                      ? logits_routing(a, model, config_json, ckpt, in, l, tokens, config, routing_text)
                                      : topk_routing(a, in, l, tokens, config, routing_text);
  report_unread(in);
  MoeLoadOptions load;
  load.shared_experts = a.shared_experts;
  const LoadedExperts loaded = ckpt.load_moe(l.name, load);
  config.shared_experts = loaded.shared_experts;
  MoeLayer layer = MoeLayer::create(ctx, loaded.experts, config);
  fmt::print("layer {}: MoE ({}), {}, E={}{} H={} I={}; {}; {}{}; strategy {}\n", l.name, l.expert_naming,
             l.scheme.name(), l.num_experts,
             loaded.shared_experts ? fmt::format(" + {} shared (fused)", loaded.shared_experts) : std::string(),
             l.hidden, l.intermediate, routing_text, describe(config.activation),
             loaded.experts.w13_bias.empty() ? "" : ", with biases",
             layer.kernel_description(std::max<std::int64_t>(tokens, 1)));
  const MoeRun run = run_moe(ctx, layer, config.output, x, routing, tokens);
  fmt::print("ran {} tokens on {}: {} (token, expert) pairs, {} expert weight passes\n", tokens, ctx.info().name,
             run.stats.local_pairs, run.stats.expert_passes);
  write_output(a, l.name, l.scheme, run.output, tokens, l.hidden);
  if (a.check) report_check(check_moe(loaded.experts, config, x, routing, tokens, run.output));
}

// Whether `prefix` names a gated MLP of quantized projections (Checkpoint::load_mlp): an MoE
// layer's shared expert or a dense layer's MLP.
bool is_mlp(const std::vector<std::string>& modules, const std::string& prefix) {
  for (const char* projection : {".gate_proj", ".up_proj", ".down_proj"})
    if (std::find(modules.begin(), modules.end(), prefix + projection) == modules.end()) return false;
  return true;
}

// The MLP as an MoE layer of one expert (k = 1, every id 0, every weight 1): x [T, H] only.
void run_mlp_layer(const RunArgs& a, const Context& ctx, const Checkpoint& ckpt, LayerInputs& in) {
  const LoadedExperts loaded = ckpt.load_mlp(a.layer);
  std::int64_t tokens = -1;
  const std::vector<std::uint16_t> x = in.bf16_matrix(
      "x", tokens, loaded.experts.hidden, fmt::format("the activations [T, hidden = {}] of {}", loaded.experts.hidden, a.layer));
  report_unread(in);
  MoeConfig config;
  config.scheme = loaded.scheme;
  config.top_k = 1;
  config.max_tokens = std::max<std::int64_t>(tokens, 1);
  config.output = a.output_dtype == "bf16" ? MoeOutput::bf16 : MoeOutput::fp32;
  MoeLayer layer = MoeLayer::create(ctx, loaded.experts, config);
  MoeRoutingInput routing;
  routing.from_logits = false;
  routing.topk_ids.assign(static_cast<std::size_t>(tokens), 0);
  routing.topk_weights.assign(static_cast<std::size_t>(tokens), 1.0f);
  fmt::print("layer {}: gated MLP (gate_proj, up_proj, down_proj as one expert), {}, H={} I={}; SwiGLU; strategy {}\n",
             a.layer, loaded.scheme.name(), loaded.experts.hidden, loaded.experts.intermediate,
             layer.kernel_description(std::max<std::int64_t>(tokens, 1)));
  const MoeRun run = run_moe(ctx, layer, config.output, x, routing, tokens);
  fmt::print("ran {} tokens on {}\n", tokens, ctx.info().name);
  write_output(a, a.layer, loaded.scheme, run.output, tokens, loaded.experts.hidden);
  if (a.check) report_check(check_moe(loaded.experts, config, x, routing, tokens, run.output));
}

void run_layer(const RunArgs& a) {
  const Checkpoint ckpt = Checkpoint::open(a.dir);
  LayerInputs in(a.input);
  const std::vector<std::string> modules = ckpt.quantized_modules();
  const bool linear = std::find(modules.begin(), modules.end(), a.layer) != modules.end();
  const std::optional<CheckpointLayer> moe = linear ? std::nullopt : moe_layer_named(ckpt, a.layer);
  const bool mlp = !linear && !moe && is_mlp(modules, a.layer);
  if (!linear && !moe && !mlp) unknown_layer(ckpt, a.layer);
  if (a.top_k && *a.top_k < 1) fail("--topk {} must be at least 1", *a.top_k);
  if ((linear || mlp) && (a.top_k || a.renormalize || a.no_renormalize || !a.activation.empty() || a.swiglu_alpha ||
                          a.swiglu_limit || a.shared_experts))
    fail("--topk / --renormalize / --activation / --shared-experts apply to MoE layers; '{}' is a {}", a.layer,
         linear ? "linear module" : "gated MLP");
  const Context ctx = Context::create();
  if (mlp) {
    run_mlp_layer(a, ctx, ckpt, in);
  } else if (linear) {
    run_linear_layer(a, ctx, ckpt, in);
  } else {
    run_moe_layer(a, ctx, ckpt, *moe, in);
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd =
      app.add_subcommand("run", "Run one linear or MoE layer of a checkpoint on inputs from a safetensors file");
  cmd->add_option("DIR", a->dir, "Checkpoint directory")->required();
  cmd->add_option("--layer", a->layer,
                  "Linear module (model.layers.0.self_attn.q_proj), MoE layer (model.layers.0.mlp.experts, or "
                  "its prefix model.layers.0), or gated MLP (a shared expert, model.layers.3.mlp.shared_experts: "
                  "its gate_proj, up_proj and down_proj)")
      ->required();
  cmd->add_option("--input", a->input,
                  "safetensors file with x [T, K] (BF16/F32); for MoE also router_logits [T, E], or topk_ids + "
                  "topk_weights [T, k]")
      ->required();
  cmd->add_option("--output", a->output, "safetensors file to write y to")->required();
  cmd->add_option("--topk", a->top_k, "MoE top-k for router logits (default: config.json num_experts_per_tok)");
  auto* renorm = cmd->add_flag("--renormalize", a->renormalize,
                               "MoE: divide the top-k weights by their sum (default: config.json norm_topk_prob)");
  cmd->add_flag("--no-renormalize", a->no_renormalize, "MoE: keep the softmax weights of the top-k")->excludes(renorm);
  cmd->add_option("--activation", a->activation,
                  "MoE: FC1's activation, swiglu or gpt-oss's swiglu_clamped (default: what config.json says)")
      ->check(CLI::IsMember({"swiglu", "swiglu_clamped"}));
  cmd->add_option("--swiglu-alpha", a->swiglu_alpha, "MoE, swiglu_clamped: alpha (default 1.702)");
  cmd->add_option("--swiglu-limit", a->swiglu_limit, "MoE, swiglu_clamped: limit (default 7)");
  cmd->add_option("--output-dtype", a->output_dtype, "Output type of y")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd->add_flag("--shared-experts", a->shared_experts,
                "MoE: fuse the layer's shared expert (<prefix>.shared_experts: DeepSeek, Kimi-K2, GLM-4.5), weight "
                "1 for every token after its routed experts");
  cmd->add_flag("--check", a->check, "Compare every output with the scalar reference; fail when out of bounds");
  cmd->callback([a] { run_layer(*a); });
}

}  // namespace fp4cl::cli
