#include "demo_layers.hpp"

#include <fmt/format.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fp4cl/formats.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "layer_runs.hpp"
#include "support/check.hpp"
#include "timing.hpp"

namespace fp4cl::cli {

namespace {

constexpr int kWarmup = 2;

// N(0, 1) BF16 activations [tokens, cols]: the stand-in for RMS-normalized hidden states.
std::vector<std::uint16_t> hidden_states(std::int64_t tokens, std::int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(tokens * cols));
  for (auto& v : x) v = float_to_bf16(normal(rng));
  return x;
}

// Router logits x · Wᵀ from the layer's router weight `<container without .experts>.gate.weight`
// ([E, H], BF16 or F32) when the checkpoint has it, else N(0, 2) values. Says which in `source`.
std::vector<float> router_logits(const Checkpoint& ckpt, const CheckpointLayer& moe,
                                 const std::vector<std::uint16_t>& x, std::int64_t tokens, unsigned seed,
                                 std::string& source) {
  const std::int64_t E = moe.num_experts, H = moe.hidden;
  std::vector<float> logits(static_cast<std::size_t>(tokens * E));
  const std::string container = moe.name.substr(0, moe.name.rfind('.'));  // "model.layers.0.mlp"
  const std::string name = container + ".gate.weight";
  const std::optional<TensorView> w = ckpt.tensors().find(name);
  if (w && w->shape() == std::vector<std::int64_t>{E, H} && (w->dtype() == Dtype::bf16 || w->dtype() == Dtype::f32)) {
    std::vector<float> router(static_cast<std::size_t>(E * H));
    if (w->dtype() == Dtype::f32) {
      router = w->to_vector<float>();
    } else {
      const std::vector<std::uint16_t> bits = w->to_vector<std::uint16_t>(Dtype::bf16);
      for (std::size_t i = 0; i < bits.size(); ++i) router[i] = bf16_to_float(bits[i]);
    }
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t e = 0; e < E; ++e) {
        double sum = 0;
        for (std::int64_t h = 0; h < H; ++h)
          sum += static_cast<double>(bf16_to_float(x[static_cast<std::size_t>(t * H + h)])) *
                 static_cast<double>(router[static_cast<std::size_t>(e * H + h)]);
        logits[static_cast<std::size_t>(t * E + e)] = static_cast<float>(sum);
      }
    }
    source = fmt::format("x · {}ᵀ", name);
    return logits;
  }
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (auto& v : logits) v = normal(rng);
  source = fmt::format("N(0, 2) values (no router weight '{}' [{}, {}])", name, E, H);
  return logits;
}

template <typename T>
cl::Buffer device_copy(const Context& ctx, const std::vector<T>& v) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, v.size() * sizeof(T),
               const_cast<T*>(v.data()), &err);
  check_cl(err, "allocating a {}-byte buffer", v.size() * sizeof(T));
  return b;
}

double gigabytes_per_second(std::uint64_t bytes, double microseconds) {
  return microseconds > 0 ? static_cast<double>(bytes) / (microseconds * 1e3) : 0.0;
}

// MoeConfig::from_checkpoint, or (when config.json does not say) top-k 2 with renormalization.
MoeConfig moe_config(const Checkpoint& ckpt, const CheckpointLayer& moe, std::string& routing) {
  try {
    MoeConfig c = MoeConfig::from_checkpoint(ckpt, moe.name);
    routing = fmt::format("top-{}{} (config.json)", c.top_k, c.renormalize ? " renormalized" : "");
    return c;
  } catch (const Error& e) {
    MoeConfig c;
    c.scheme = moe.scheme;
    c.top_k = static_cast<int>(std::min<std::int64_t>(2, moe.num_experts));
    routing = fmt::format("top-{} renormalized (the demo's choice: {})", c.top_k, e.what());
    return c;
  }
}

}  // namespace

bool demo_moe(const Context& ctx, const Checkpoint& ckpt, const LayerDemoOptions& o) {
  const std::vector<CheckpointLayer> layers = ckpt.moe_layers();
  if (layers.empty()) {
    fmt::print("MoE: the checkpoint has no quantized MoE layer; section skipped\n");
    return true;
  }
  const CheckpointLayer& moe = layers.front();
  std::string routing_text;
  MoeConfig config = moe_config(ckpt, moe, routing_text);
  config.max_tokens = o.tokens;
  const LoadedExperts loaded = ckpt.load_moe(moe.name);
  MoeLayer layer = MoeLayer::create(ctx, loaded.experts, config);
  fmt::print("MoE layer {}: {} ({}), E={} H={} I={}, {}, strategy {}\n", moe.name, moe.scheme.name(),
             to_string(ckpt.config().producer()), moe.num_experts, moe.hidden, moe.intermediate, routing_text,
             layer.kernel_description(o.tokens));

  const std::vector<std::uint16_t> x = hidden_states(o.tokens, moe.hidden, o.seed);
  MoeRoutingInput routing;
  std::string logits_source;
  routing.router_logits = router_logits(ckpt, moe, x, o.tokens, o.seed, logits_source);
  fmt::print("  input: {} tokens, x ~ N(0, 1) BF16; router logits = {}, softmax top-k on the device\n", o.tokens,
             logits_source);
  const MoeRun run = run_moe(ctx, layer, config.output, x, routing, o.tokens);
  const CheckResult check = check_moe(loaded.experts, config, x, routing, o.tokens, run.output);
  fmt::print("  check against the scalar reference: {}\n", describe(check));

  const cl::Buffer xb = device_copy(ctx, x), lb = device_copy(ctx, routing.router_logits);
  const cl::Buffer out = device_copy(ctx, std::vector<std::uint16_t>(x.size()));
  MoeStats stats;
  const double us = median_microseconds(ctx, kWarmup, o.runs, [&] {
    const MoeCall call = layer.enqueue_logits(xb, lb, out, o.tokens);
    stats = layer.finish(call);
    return call.events();
  });
  fmt::print(
      "  forward: {:.1f} µs per call (median of {}), {} (token, expert) pairs; {} expert passes stream "
      "{:.2f} MB of FP4 weights: {:.2f} GB/s\n",
      us, o.runs, stats.local_pairs, stats.expert_passes, static_cast<double>(stats.weight_bytes) / 1e6,
      gigabytes_per_second(stats.weight_bytes, us));
  return check.ok();
}

bool demo_linear(const Context& ctx, const Checkpoint& ckpt, const LayerDemoOptions& o) {
  std::optional<CheckpointLayer> chosen;
  for (const CheckpointLayer& l : ckpt.layers()) {
    if (l.kind != LayerKind::linear) continue;
    const bool q_proj = l.name.size() >= 6 && l.name.compare(l.name.size() - 6, 6, "q_proj") == 0;
    if (!chosen || q_proj) chosen = l;
    if (q_proj) break;
  }
  if (!chosen) {
    fmt::print("linear: the checkpoint has no quantized linear module outside its MoE layers; section skipped\n");
    return true;
  }
  const LoadedLinear loaded = ckpt.load_linear(chosen->name);
  LinearOptions options;
  options.max_tokens = o.tokens;
  options.bias = loaded.bias;
  Linear layer = Linear::create(ctx, loaded.weight, loaded.scheme, options);
  fmt::print("linear {}: {} [{}, {}], kernel {}\n", chosen->name, loaded.scheme.name(), chosen->out_features,
             chosen->in_features, layer.kernel_description(o.tokens));
  const std::vector<std::uint16_t> x = hidden_states(o.tokens, chosen->in_features, o.seed + 7);
  const LayerOutput y = run_linear(layer, x, o.tokens);
  const CheckResult check = check_linear(loaded.scheme, loaded.weight, x, o.tokens, y, loaded.bias);
  fmt::print("  check against the scalar reference: {}\n", describe(check));

  const cl::Buffer xb = device_copy(ctx, x);
  const cl::Buffer yb =
      device_copy(ctx, std::vector<std::uint16_t>(static_cast<std::size_t>(o.tokens * chosen->out_features)));
  const double us = median_microseconds(ctx, kWarmup, o.runs, [&] {
    layer.enqueue(xb, yb, o.tokens);
    return layer.last_events();
  });
  fmt::print("  forward: {:.1f} µs per call (median of {}) for {} tokens; {:.2f} MB of FP4 weights: {:.2f} GB/s\n", us,
             o.runs, o.tokens, static_cast<double>(layer.weight_bytes()) / 1e6,
             gigabytes_per_second(layer.weight_bytes(), us));
  return check.ok();
}

}  // namespace fp4cl::cli
