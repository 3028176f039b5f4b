// fp4cl-bench moe: times the fused FP4 MoE layer (routing given as top-k ids and weights, then
// dispatch, FC1 + SwiGLU, FC2 and the top-k sum), each strategy first checked against the scalar
// reference, over a sweep of token counts.
//
//   fp4cl-bench moe --preset qwen3-30b-a3b --tokens 1,8,64,512 --scheme nvfp4-w4a16,nvfp4-w4a4
//   fp4cl-bench moe --hidden 2048 --inter 768 --experts 128 --topk 8 --kernel all
//
// Bytes per call count only the experts that received tokens (each once: the weights a call must
// read at least); flops are 2·T·k·3·I·H. Every timed call has its own random routing (rotated over
// a set of routings), so that consecutive calls do not find their experts in the cache; layers
// whose experts all fit in the cache are also rotated over copies. --routings sets how many
// routings a row cycles through. --tiles times several FP4CL_MOE_TILES settings in one process
// (the experts made once, a layer per setting):
//
//   fp4cl-bench moe --preset mixtral-8x7b --tokens 1 --tiles "mma.row_loop=1;mma.row_loop=2"
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "bench_options.hpp"
#include "bench_run.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"
#include "presets.hpp"
#include "reference_checks.hpp"
#include "synthetic_data.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::bench {

namespace {

struct MoeArgs {
  RunOptions run;
  std::string preset;
  std::int64_t hidden = 0, inter = 0, experts = 0;
  int topk = 0;
  std::string output = "bf16";
  bool batch_invariant = false;
  std::string activation;  // "" (the preset's), "swiglu" or "gpt-oss"
  int routings = 0;        // routings rotated per row; 0: as many as the rotation span needs
  std::string tiles;       // FP4CL_MOE_TILES settings separated by ';' ("": the environment's)
  std::string router = "topk";  // topk (precomputed ids), logits (the preset's router), softmax, deepseek-v3
  int shared_experts = 0;       // MoeConfig::shared_experts: more experts, with every token
};

// --tiles' settings: each item FP4CL_MOE_TILES's "key=value,..." text; none (the variable as the
// process found it) without --tiles.
std::vector<std::optional<std::string>> tile_settings(const std::string& list) {
  if (list.empty()) return {std::nullopt};
  std::vector<std::optional<std::string>> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t end = std::min(list.find(';', pos), list.size());
    const std::string item = list.substr(pos, end - pos);
    if (item.empty()) throw Error("--tiles: an empty setting in '" + list + "' (settings are separated by ';')");
    out.emplace_back(item);
    pos = end + 1;
  }
  return out;
}

// FP4CL_MOE_TILES set to a --tiles setting while layers are created (the layer reads it there),
// then as it was.
class ScopedTiles {
 public:
  explicit ScopedTiles(const std::optional<std::string>& setting) : setting_(setting) {
    if (!setting_) return;
    if (const char* v = std::getenv("FP4CL_MOE_TILES")) before_ = v;
    ::setenv("FP4CL_MOE_TILES", setting_->c_str(), 1);
  }
  ~ScopedTiles() {
    if (!setting_) return;
    if (before_) ::setenv("FP4CL_MOE_TILES", before_->c_str(), 1);
    else ::unsetenv("FP4CL_MOE_TILES");
  }
  ScopedTiles(const ScopedTiles&) = delete;
  ScopedTiles& operator=(const ScopedTiles&) = delete;

 private:
  std::optional<std::string> setting_, before_;
};

struct MoeShape {
  std::string label;
  std::int64_t hidden, inter, experts;
  int topk;
  bool gpt_oss = false;        // gpt-oss's clamped SwiGLU and expert biases
  bool deepseek_gate = false;  // --router-logits: DeepSeek-V3's gate
};

MoeShape shape_of_preset_or_args(const MoeArgs& a);

// The shape with the activation --activation asks for, else the preset's.
MoeShape shape_of(const MoeArgs& a) {
  MoeShape s = shape_of_preset_or_args(a);
  if (a.activation == "gpt-oss") s.gpt_oss = true;
  else if (a.activation == "swiglu") s.gpt_oss = false;
  else if (!a.activation.empty())
    throw Error("--activation must be swiglu or gpt-oss, got '" + a.activation + "'");
  return s;
}

MoeShape shape_of_preset_or_args(const MoeArgs& a) {
  const bool explicit_shape = a.hidden || a.inter || a.experts || a.topk;
  if (!a.preset.empty()) {
    if (explicit_shape) throw Error("give either --preset or --hidden/--inter/--experts/--topk, not both");
    const ModelPreset p = find_preset(a.preset);
    return {p.name, p.hidden, p.intermediate, p.experts, p.top_k, p.gpt_oss_activation, p.deepseek_gate};
  }
  if (!explicit_shape) {
    const ModelPreset p = find_preset("qwen3-30b-a3b");
    return {p.name, p.hidden, p.intermediate, p.experts, p.top_k};
  }
  if (!a.hidden || !a.inter || !a.experts || !a.topk)
    throw Error("an explicit MoE shape needs all of --hidden, --inter, --experts and --topk");
  if (a.topk > a.experts) throw Error(fmt::format("--topk {} exceeds --experts {}", a.topk, a.experts));
  return {fmt::format("H={} I={} E={} k={}", a.hidden, a.inter, a.experts, a.topk), a.hidden, a.inter, a.experts,
          a.topk};
}

// A DeepSeek-V3-like correction bias for --router-logits: E values in [-0.05, 0.05].
std::vector<float> gate_bias(std::int64_t experts) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  std::vector<float> b(static_cast<std::size_t>(experts));
  for (float& v : b) v = d(rng);
  return b;
}

template <typename T>
cl::Buffer device_buffer(const Context& ctx, const std::vector<T>& host) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, host.size() * sizeof(T),
               const_cast<T*>(host.data()), &err);
  if (err != CL_SUCCESS) throw Error("allocating a benchmark buffer", err);
  return b;
}

cl::Buffer output_buffer(const Context& ctx, std::size_t bytes) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE, bytes, nullptr, &err);
  if (err != CL_SUCCESS) throw Error("allocating the benchmark's output buffer", err);
  return b;
}

std::string reproduce(const MoeArgs& a, const MoeShape& s, const QuantScheme& scheme, const std::string& kernel,
                      std::int64_t tokens, const std::optional<std::string>& tiles) {
  std::string cmd = (tiles ? "FP4CL_MOE_TILES='" + *tiles + "' " : std::string()) + command_prefix("moe");
  if (!a.preset.empty()) cmd += " --preset " + a.preset;
  else cmd += fmt::format(" --hidden {} --inter {} --experts {} --topk {}", s.hidden, s.inter, s.experts, s.topk);
  cmd += fmt::format(" --scheme {} --tokens {}", tuning::scheme_key(scheme), tokens);
  if (!kernel.empty()) cmd += " --kernel " + kernel;
  if (a.output != "bf16") cmd += " --output " + a.output;
  if (a.batch_invariant) cmd += " --batch-invariant";
  if (!a.activation.empty()) cmd += " --activation " + a.activation;
  if (a.routings > 0) cmd += fmt::format(" --routings {}", a.routings);
  if (a.router != "topk") cmd += " --router " + a.router;
  if (a.shared_experts > 0) cmd += fmt::format(" --shared-experts {}", a.shared_experts);
  return cmd + common_command_options(a.run);
}

void run_moe(const MoeArgs& a) {
  if (a.output != "bf16" && a.output != "fp32") throw Error("--output must be bf16 or fp32, got '" + a.output + "'");
  const MoeShape shape = shape_of(a);
  const std::vector<QuantScheme> schemes = parse_schemes(a.run.schemes);
  const std::vector<std::string> kernels = resolve_kernels(a.run.kernels, moe_kernel_strategies(), "MoE");
  // Every (strategy, --tiles setting): rows with layers of their own over the same experts.
  std::vector<std::pair<std::string, std::optional<std::string>>> variants;
  for (const std::string& kernel : kernels)
    for (const std::optional<std::string>& tiles : tile_settings(a.tiles)) variants.emplace_back(kernel, tiles);
  const std::int64_t max_tokens = *std::max_element(a.run.tokens.begin(), a.run.tokens.end());
  const bool bf16_out = a.output == "bf16";
  const bool router_logits = a.router != "topk";

  Context ctx = bench_context();
  BenchRun run(ctx, "fp4cl-bench moe", schemes.size() * variants.size() * a.run.tokens.size(), a.run);
  const double rotation = rotation_bytes(ctx, a.run);
  for (const QuantScheme& scheme : schemes) {
    // gpt-oss's layers: biases on every expert (the layer copies' too).
    const auto experts_of = [&](std::uint64_t seed) {
      Fp4Experts ex = make_experts(scheme.weight, shape.hidden, shape.inter, shape.experts + a.shared_experts, seed);
      if (shape.gpt_oss) add_expert_biases(ex, seed + 500);
      return ex;
    };
    std::vector<Fp4Experts> experts{experts_of(1)};
    for (const auto& [kernel, tiles] : variants) {
      MoeConfig config;
      config.scheme = scheme;
      config.top_k = shape.topk;
      config.max_tokens = max_tokens;
      config.kernel = kernel;
      config.output = bf16_out ? MoeOutput::bf16 : MoeOutput::fp32;
      config.batch_invariant = a.batch_invariant;
      config.shared_experts = a.shared_experts;
      if (shape.gpt_oss) config.activation = MoeActivation::gpt_oss();
      if (router_logits && (a.router == "deepseek-v3" || (a.router == "logits" && shape.deepseek_gate)))
        config.logit_routing = MoeLogitRouting::deepseek_v3(gate_bias(shape.experts));
      std::vector<MoeLayer> layers;
      std::size_t copies = 1;
      double create_s = 0.0;  // the first layer's creation: weights prepared and uploaded, kernels built
      try {
        const ScopedTiles scoped(tiles);
        const auto start = std::chrono::steady_clock::now();
        layers.push_back(MoeLayer::create(ctx, experts[0], config));
        create_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // Copies of the whole layer only when all its experts fit in the rotation span.
        copies = copies_for_rotation(rotation, static_cast<double>(layers[0].expert_weight_bytes()) *
                                                   static_cast<double>(shape.experts),
                                     8);
        for (std::size_t c = 1; c < copies; ++c)
          layers.push_back(MoeLayer::create(ctx, experts_of(c + 1), config));
      } catch (const Error& e) {
        if (!tiles) throw;
        throw Error(fmt::format("--tiles setting '{}': {}", *tiles, e.what()));
      }
      const double expert_bytes = static_cast<double>(layers[0].expert_weight_bytes());
      for (std::int64_t tokens : a.run.tokens) {
        const std::vector<std::uint16_t> x = make_activations(tokens, shape.hidden, 99 + static_cast<std::uint64_t>(tokens));
        const double bytes_per_call_estimate = expert_bytes * static_cast<double>(std::min<std::int64_t>(
                                                                  shape.experts, tokens * shape.topk));
        // Once a call's weights exceed the rotation span this is one routing; --routings asks for
        // more, so that a row times the spread of per-expert counts that routing gives (the
        // tuner times 16).
        const std::size_t routings = a.routings > 0 ? static_cast<std::size_t>(a.routings)
                                                    : copies_for_rotation(rotation, bytes_per_call_estimate, 64);
        // Top-k ids and weights, or router logits and the reference's routing of them.
        std::vector<Routing> routing;
        std::vector<reference::MoeRouting> logit_routing;
        std::vector<cl::Buffer> ids, weights, logits;
        double distinct = 0.0;
        for (std::size_t r = 0; r < routings; ++r) {
          if (router_logits) {
            const std::vector<float> l = make_logits(tokens, shape.experts, 1000 + r);
            logits.push_back(device_buffer(ctx, l));
            logit_routing.push_back(reference::routing_from_logits(l, tokens, shape.experts, shape.topk,
                                                                   config.renormalize, config.logit_routing));
            routing.push_back({logit_routing.back().ids, {}});
          } else {
            routing.push_back(make_routing(tokens, shape.topk, shape.experts, 1000 + r));
            ids.push_back(device_buffer(ctx, routing.back().ids));
            weights.push_back(device_buffer(ctx, routing.back().weights));
          }
          distinct += static_cast<double>(distinct_experts(routing.back()) + a.shared_experts);
        }
        const cl::Buffer xb = device_buffer(ctx, x);
        const std::size_t out_bytes = static_cast<std::size_t>(tokens * shape.hidden) * (bf16_out ? 2 : 4);
        const cl::Buffer out = output_buffer(ctx, out_bytes);

        Row row;
        row.op = "moe";
        row.shape = shape.label;
        row.scheme = tuning::scheme_key(scheme);
        row.kernel = layers[0].strategy_for(tokens);
        row.detail = fmt::format("{}; {} pair(s) per weight pass, {} routings x {} layer copies rotated{}{}; layer "
                                 "created in {:.1f} s",
                                 layers[0].kernel_description(tokens), layers[0].tile_pairs_for(tokens), routings,
                                 copies, shape.gpt_oss ? "; gpt-oss's clamped SwiGLU and expert biases" : "",
                                 (!router_logits                         ? std::string()
                                  : config.logit_routing.plain_softmax() ? std::string("; router logits (softmax top-k)")
                                                                         : std::string("; router logits (DeepSeek-V3's gate)")) +
                                     (a.shared_experts ? fmt::format("; {} shared expert(s)", a.shared_experts) : ""),
                                 create_s);
        row.series = fmt::format("{} {} {}{}", shape.label, row.scheme, kernel.empty() ? "auto" : kernel,
                                 tiles ? " " + *tiles : std::string());
        row.tokens = tokens;
        row.weight_bytes = static_cast<double>(layers[0].expert_weight_bytes_for(tokens)) * distinct /
                           static_cast<double>(routings);
        row.flops = 2.0 * static_cast<double>(tokens) * (shape.topk + a.shared_experts) * 3.0 * static_cast<double>(shape.inter) *
                    static_cast<double>(shape.hidden);
        row.command = reproduce(a, shape, scheme, kernel, tokens, tiles);
        if (a.run.no_check) {
          row.check = "skipped";
        } else {
          if (router_logits) layers[0].forward_logits(xb, logits[0], out, tokens);
          else layers[0].forward_topk(xb, ids[0], weights[0], out, tokens);
          std::vector<std::uint16_t> out16;
          std::vector<float> out32;
          if (bf16_out) out16.resize(out_bytes / 2);
          else out32.resize(out_bytes / 4);
          const cl_int err = ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, out_bytes,
                                                           bf16_out ? static_cast<void*>(out16.data()) : out32.data());
          if (err != CL_SUCCESS) throw Error("reading the MoE output back", err);
          row.check = !router_logits ? check_moe_output(experts[0], config, x, routing[0], tokens, out16, out32)
                      : logit_routing[0].ambiguous
                          ? "skipped: the logits' routing is ambiguous in fp32"
                          : check_moe_output(moe_check_reference(experts[0], config, x, logit_routing[0], tokens), out16,
                                             out32);
        }
        const std::size_t cycle = routings * copies;
        MoeLayer* last_layer = nullptr;
        MoeCall last_call;
        const auto time_row = [&] {
          const Timing t = time_calls(ctx, row_warmup(a.run, copies), a.run.iters, [&](int i) {
            const auto n = static_cast<std::size_t>(i);
            last_layer = &layers[n % copies];
            const std::size_t r = (n % cycle) / copies;
            last_call = router_logits ? last_layer->enqueue_logits(xb, logits[r], out, tokens)
                                        : last_layer->enqueue_topk(xb, ids[r], weights[r], out, tokens);
            return last_call.events();
          });
          last_layer->finish(last_call);  // throws on a status error (the timing would be meaningless)
          return t;
        };
        row.timing = time_row();
        if (a.run.launches) {
          // The per-command breakdown in calls of their own: an event on every launch costs host
          // time, which on a GPU shows as gaps between the commands (MoeLaunchEvents), so the
          // row's time stays that of calls with events only at their ends.
          for (MoeLayer& l : layers) l.set_launch_events(MoeLaunchEvents::every);
          const Timing breakdown = time_row();
          for (MoeLayer& l : layers) l.set_launch_events(MoeLaunchEvents::ends);
          std::vector<std::string> names;
          for (const MoeLaunch& l : last_call.launches)  // and its size: were its work-groups one pass?
            names.push_back(l.work_groups() > 0
                                ? fmt::format("{} ({} work-groups of {})", l.kernel, l.work_groups(), l.work_group_size)
                                : fmt::format("{} ({} work-items)", l.kernel, l.work_items));
          print_commands(row.series + fmt::format(" T={}", tokens), breakdown, names);
          fmt::print(stderr, "  the row's time, without an event on every launch: {:.1f} us (median)\n",
                     row.timing.median_us);
        }
        run.add(std::move(row));
      }
    }
  }
  run.finish();
}

}  // namespace

void register_moe(CLI::App& app) {
  auto a = std::make_shared<MoeArgs>();
  CLI::App* moe = app.add_subcommand("moe", "time the fused FP4 MoE layer (each strategy checked against the reference first)");
  add_run_options(moe, a->run, {1, 8, 64, 512}, {"nvfp4-w4a16"});
  moe->add_option("--preset", a->preset, "model preset (" + preset_names() + "); default qwen3-30b-a3b");
  moe->add_option("--hidden", a->hidden, "H")->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 18));
  moe->add_option("--inter", a->inter, "I, per expert")->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 18));
  moe->add_option("--experts", a->experts, "E, routed experts")->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
  moe->add_option("--topk", a->topk, "k, experts per token")->check(CLI::Range(1, 64));
  moe->add_option("--output", a->output, "bf16 | fp32")->capture_default_str();
  moe->add_flag("--batch-invariant", a->batch_invariant,
                "MoeConfig::batch_invariant: every grouped tile sums in the order of a full tile");
  moe->add_option("--activation", a->activation,
                  "swiglu | gpt-oss (clamped SwiGLU, alpha 1.702, limit 7, with expert biases); default: the preset's "
                  "(gpt-oss-20b: gpt-oss), else swiglu");
  moe->add_option("--routings", a->routings,
                  "random routings each row's timed calls cycle through (default: as many as keep the weights a call "
                  "reads out of the cache, 1 to 64; at least --iters for each to be timed)")
      ->check(CLI::Range(1, 4096));
  moe->add_option("--shared-experts", a->shared_experts,
                  "shared experts (MoeConfig::shared_experts) beside the --experts routed ones, with every token "
                  "(deepseek-v3 has 1)")
      ->check(CLI::Range(0, 64));
  moe->add_option("--router", a->router,
                  "topk: precomputed top-k ids and weights; logits: random router logits routed on the device by the "
                  "preset's router (deepseek-v3: DeepSeek-V3's gate with a random correction bias, else softmax "
                  "top-k); softmax or deepseek-v3: that router")
      ->check(CLI::IsMember({"topk", "logits", "softmax", "deepseek-v3"}))
      ->capture_default_str();
  moe->add_option("--tiles", a->tiles,
                  "FP4CL_MOE_TILES settings separated by ';' (\"mma.row_loop=1;mma.row_loop=2,mma.unroll=4\"), each "
                  "timed with its own layer over the same experts (one process: the experts are made once); "
                  "default: the environment's");
  moe->callback([a] { run_moe(*a); });
}

}  // namespace fp4cl::bench
