#include "fp4cl/moe.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cl/caller_buffers.hpp"
#include "cl/opencl_calls.hpp"
#include "kernels/moe_build_options.hpp"
#include "kernels/moe_registry.hpp"
#include "layers/moe_expert_map.hpp"
#include "layers/moe_experts_check.hpp"
#include "layers/moe_pipeline.hpp"
#include "layers/moe_weights.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

// The status words: first invalid topk id (global pair index), first out-of-range expert_map
// entry (same), tiles run, local pairs run.
constexpr cl_int kStatusReset[4] = {INT_MAX, INT_MAX, 0, 0};

void check_buffer(const Context& ctx, const cl::Buffer& b, const char* what, std::int64_t bytes, const char* shape) {
  const std::int64_t size = caller_buffer_bytes(ctx, b, "MoE", what);
  if (size < bytes) fail("MoE: the {} buffer has {} bytes; {} needs {}", what, size, shape, bytes);
}

// How a layer's kernels are built on `ctx`, and what their x1q / x2q hold: the same for a layer
// and for its copies on other queues of the device (MoeLayer::with_context).
struct MoeBuildPlan {
  MoeNumerics numerics;
  MoeProgramOptions options;
  int x_form_bytes = 0;  // moe_x_form_bytes
  // Whether grouped and decode's few-pair tiles read BF16 pairs (moe_fp4_vec.cl, MOE_BF16DOT: the
  // processor's BF16 dot products, for NVFP4, and for MXFP4 where its table decode is exact).
  bool bf16_pairs = false;
};

// FC1's activation and the experts' biases as the kernels' defines (kernels/moe_fp4_vec.cl,
// moe_act): alpha and limit as exact hexadecimal fp32 literals.
void add_moe_activation(BuildOptions& options, const MoeActivation& act, bool biases) {
  if (biases) options.define("MOE_BIAS");
  if (act.kind == MoeActivation::Kind::swiglu_clamped)
    options.define("MOE_ACT_CLAMPED")
        .define("MOE_ACT_ALPHA", fmt::format("{:a}f", act.alpha))
        .define("MOE_ACT_LIMIT", fmt::format("{:a}f", act.limit));
}

MoeBuildPlan moe_build_plan(const Context& ctx, const MoeConfig& config, const MoeSelection& selection, bool biases) {
  MoeBuildPlan plan;
  const MoeLayout& layout = selection.layout;
  const bool nvfp4_w4a4 = config.scheme.weight == WeightFormat::nvfp4 && !config.scheme.w4a16();
  // The mma kernels decode E2M1 as BF16 subnormals only (kernels/common/fp4_mma.cl).
  plan.numerics = moe_numerics(ctx, nvfp4_w4a4, selection.uses(MoeStrategy::mma));
  plan.options.numerics = plan.numerics.options;
  plan.options.scheme = config.scheme;
  plan.options.output = config.output;
  plan.options.batch_invariant = config.batch_invariant;  // MOE_BATCH_INVARIANT (MoeStrategyKernels)
  if (moe_bf16_dot_enabled(ctx)) plan.options.numerics.define("FP4_DPBF16");  // few-pair tiles (moe_fp4_vec.cl)
  plan.bf16_pairs = moe_bf16_dot_enabled(ctx) &&
                    (config.scheme.weight == WeightFormat::nvfp4 || plan.numerics.e2m1_exp == 0);
  add_moe_int_dot(plan.options.numerics, ctx, config.scheme, layout.vec, layout.group);
  add_moe_scaled_x(plan.options.numerics, ctx, config.scheme, layout.vec, layout.group, plan.numerics.e2m1_exp);
  plan.x_form_bytes = moe_x_form_bytes(ctx, config.scheme, layout.vec, layout.group, plan.numerics.e2m1_exp);
  add_moe_activation(plan.options.numerics, config.activation, biases);
  return plan;
}

// The router kernel for plain softmax top-k: the work-group one wherever the mma strategy may
// run (its FC1 routes router logits as that kernel does, MMA_ROUTE_LOGITS: the same bits in every
// chunk), else the device's (MoeSoftmaxRouter::automatic).
MoeSoftmaxRouter softmax_router(const MoeSelection& selection) {
  return selection.uses(MoeStrategy::mma) ? MoeSoftmaxRouter::work_group : MoeSoftmaxRouter::automatic;
}

// `options` with the layer's logit routing for an FC1 that routes router logits itself (where
// fp4cl computes it: MoeRouter's moe_route_build).
MoeProgramOptions with_logit_routing(MoeProgramOptions options, const Context& ctx, const MoeShape& shape,
                                     const MoeLogitRouting& routing) {
  if (routing.unsupported.empty())
    options.route = moe_route_build(ctx.info(), shape.global_experts, shape.routed_k, shape.top_k, routing);
  return options;
}

}  // namespace

struct MoeLayer::Impl {
  Context ctx;
  MoeConfig config;
  MoeShape shape;
  MoeSelection selection;
  MoeDeviceWeights weights;
  MoeWorkspace ws;
  std::unique_ptr<MoeRouter> router;
  std::vector<MoeStrategyKernels> strategies;  // one per selection.usable entry, same order
  MoeLaunchEvents launch_events = MoeLaunchEvents::ends;

  explicit Impl(const Context& c) : ctx(c) {}

  const MoeStrategyKernels& kernels_for(std::int64_t tokens) const {
    const MoeSelection::Entry& chosen = selection.for_tokens(tokens, shape.top_k);
    const auto i = static_cast<std::size_t>(&chosen - selection.usable.data());  // its tiles' kernels
    if (i >= strategies.size()) fail("MoE: strategy {} was selected but not built", to_string(chosen.id));
    return strategies[i];
  }
  // FP4 bytes per expert (codes and block scales, FC1 and FC2) in the layout strategy `id` streams.
  std::uint64_t weights_bytes_of(MoeStrategy id) const {
    return id == MoeStrategy::split ? weights.split_bytes_per_expert
           : id == MoeStrategy::mma ? weights.mma_bytes_per_expert
                                    : weights.bytes_per_expert;
  }
  MoeStrategyKernels& kernels_for(std::int64_t tokens) {
    return const_cast<MoeStrategyKernels&>(static_cast<const Impl&>(*this).kernels_for(tokens));
  }

  MoeCall enqueue(const cl::Buffer& x, const cl::Buffer& out, std::int64_t tokens, const std::vector<cl::Event>& wait,
                  const MoeRoutingInput& routing);
};

MoeLayer::MoeLayer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

MoeLayer MoeLayer::create(const Context& ctx, const Fp4Experts& experts, const MoeConfig& config) {
  const bool calibrated = config.fc2_input_scale == MoeFc2InputScale::calibrated;
  if (calibrated && (config.scheme.w4a16() || config.scheme.weight != WeightFormat::nvfp4))
    fail("MoE: a calibrated FC2 input scale applies to NVFP4 W4A4 only, not {}", config.scheme.name());
  check_moe_experts(experts, config.scheme, calibrated);
  check_moe_activation(config.activation);
  const int shared = config.shared_experts;
  if (shared < 0 || shared >= experts.num_experts)
    fail("MoE: shared_experts = {} must be in [0, {}) (the experts given, of which the last are shared)", shared,
         experts.num_experts);
  if (shared > 0 && !config.expert_map.empty())
    fail("MoE: shared_experts = {} with an expert_map: every rank would add the shared experts; give them to a "
         "layer of their own on one rank",
         shared);
  const std::vector<std::int32_t> map = resolve_expert_map(config.expert_map, experts.num_experts - shared);
  if (config.top_k < 1 || config.top_k > static_cast<std::int64_t>(map.size()))
    fail("MoE: top_k = {} must be in [1, {}] (the number of global experts)", config.top_k, map.size());
  check_moe_logit_routing(config.logit_routing, static_cast<std::int64_t>(map.size()), config.top_k);
  if (config.max_tokens < 1) fail("MoE: max_tokens = {} must be at least 1", config.max_tokens);
  const int pairs = config.top_k + shared;  // a token's pairs: routed slots, then shared experts
  if (config.max_tokens > INT_MAX / pairs)
    fail("MoE: max_tokens = {} × top_k = {}{} exceeds the kernels' 2^31 pair limit; larger batches are processed in "
         "chunks of max_tokens anyway",
         config.max_tokens, config.top_k, shared ? fmt::format(" (+ shared_experts = {})", shared) : std::string());

  auto impl = std::make_shared<Impl>(ctx);
  impl->config = config;
  impl->shape = {experts.hidden, experts.intermediate, experts.num_experts, static_cast<std::int64_t>(map.size()),
                 pairs, block_size(experts.format), config.top_k};
  const MoeProblem problem{config.scheme, experts.hidden, experts.intermediate, experts.num_experts, pairs};
  cl_uint float_width = 1;
  check_cl(ctx.device().getInfo(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &float_width),
           "querying the preferred fp32 vector width of {}", ctx.info().name);
  impl->selection = select_moe_strategies(ctx.info(), float_width, problem, config.kernel, config.batch_invariant);

  const MoeBuildPlan plan = moe_build_plan(ctx, config, impl->selection, !experts.w13_bias.empty());
  const MoeNumerics& numerics = plan.numerics;

  const MoeSelection& sel = impl->selection;
  const bool split = sel.uses(MoeStrategy::split), mma = sel.uses(MoeStrategy::mma),
             interleaved = sel.uses(MoeStrategy::grouped) || sel.uses(MoeStrategy::decode);
  if (mma && numerics.e2m1_exp != -126)
    fail("MoE kernel strategy 'mma' cannot run on {}: {} (the MMA decode needs fp32 denormals)", ctx.info().name,
         ctx.info().fp32_denormals ? "FP4CL_MOE_E2M1_DECODE = exact" : "it flushes fp32 denormals");
  impl->weights = upload_moe_weights(ctx, experts, config, map, numerics.e2m1_exp, impl->selection.layout.group,
                                     interleaved, split, mma);
  impl->ws = allocate_moe_workspace(ctx, impl->shape, impl->selection, config.max_tokens, plan.x_form_bytes,
                                    plan.bf16_pairs);
  impl->router = std::make_unique<MoeRouter>(ctx, impl->shape, config.logit_routing, softmax_router(sel));
  const MoeProgramOptions options = with_logit_routing(plan.options, ctx, impl->shape, config.logit_routing);
  for (const auto& entry : impl->selection.usable)
    impl->strategies.emplace_back(ctx, entry, impl->selection.layout, options, problem);
  log::info("MoE layer: {} E={} (of {}) H={} I={} k={}, capacity {} tokens", config.scheme.name(), experts.num_experts,
            map.size(), experts.hidden, experts.intermediate, config.top_k, impl->ws.max_tokens);
  return MoeLayer(std::move(impl));
}

MoeLayer MoeLayer::with_context(const Context& ctx) const {
  const Impl& from = *impl_;
  if (ctx.opencl_context()() != from.ctx.opencl_context()() || ctx.device()() != from.ctx.device()())
    fail("MoeLayer::with_context: the context is on another OpenCL context or device than the layer's weights "
         "(use Context::with_new_queue() of the layer's context, or create a layer there)");
  auto impl = std::make_shared<Impl>(ctx);
  impl->config = from.config;
  impl->shape = from.shape;
  impl->selection = from.selection;
  impl->weights = from.weights;  // the same device buffers: read-only after creation
  impl->launch_events = from.launch_events;
  const MoeBuildPlan plan = moe_build_plan(ctx, from.config, from.selection, from.weights.biases);
  impl->ws = allocate_moe_workspace(ctx, impl->shape, impl->selection, from.config.max_tokens, plan.x_form_bytes,
                                    plan.bf16_pairs);
  impl->router =
      std::make_unique<MoeRouter>(ctx, impl->shape, from.config.logit_routing, softmax_router(impl->selection));
  const MoeProblem problem{from.config.scheme, from.shape.hidden, from.shape.intermediate, from.shape.local_experts,
                           from.shape.top_k};
  const MoeProgramOptions options = with_logit_routing(plan.options, ctx, impl->shape, from.config.logit_routing);
  for (const auto& entry : impl->selection.usable)
    impl->strategies.emplace_back(ctx, entry, impl->selection.layout, options, problem);
  return MoeLayer(std::move(impl));
}

MoeCall MoeLayer::Impl::enqueue(const cl::Buffer& x, const cl::Buffer& out, std::int64_t tokens,
                                const std::vector<cl::Event>& wait, const MoeRoutingInput& routing) {
  if (tokens < 0) fail("MoE: tokens = {} is negative", tokens);
  if (tokens > INT_MAX / shape.top_k) fail("MoE: {} tokens × k = {} exceed the 2^31 pair limit", tokens, shape.top_k);
  MoeCall call;
  call.tokens = tokens;
  if (tokens == 0) return call;
  const bool bf16 = config.output == MoeOutput::bf16;
  check_buffer(ctx, x, "x", tokens * shape.hidden * 2, "[T, H] BF16");
  check_buffer(ctx, out, "out", tokens * shape.hidden * (bf16 ? 2 : 4), bf16 ? "[T, H] BF16" : "[T, H] fp32");
  if (routing.logits) {
    check_buffer(ctx, *routing.logits, "router_logits", tokens * shape.global_experts * 4, "[T, E_global] fp32");
  } else {
    check_buffer(ctx, *routing.topk_ids, "topk_ids", tokens * shape.routed_k * 4, "[T, k] int32");
    check_buffer(ctx, *routing.topk_weights, "topk_weights", tokens * shape.routed_k * 4, "[T, k] fp32");
  }
  // Calls share the workspace and run in order: the layer's queue is in order (Context refuses
  // others), so a call waits for the previous one without a wait list (which costs host time).
  const cl::CommandQueue& queue = ctx.queue();
  check_cl(opencl::enqueue_write(queue, ws.status, false, 0, sizeof(kStatusReset), kStatusReset,
                                 wait.empty() ? nullptr : &wait, nullptr),
           "MoE: resetting the status words");
  // The chunks' last commands get events (the call's `done`); where the queue records profiling
  // times the call's first command does too, or every command (launch_events, MoeChunk).
  cl::Event last;
  // One strategy for the whole call, chosen by its token count: every chunk runs the same
  // kernels, so the output bits do not depend on the workspace size (each kernel computes a pair
  // in an order that does not depend on the other pairs of its chunk).
  MoeStrategyKernels& k = kernels_for(tokens);
  // Every later command runs after its predecessor: the queue is in order (Context checks it).
  const bool profiling = ctx.profiling_enabled();
  for (std::int64_t offset = 0; offset < tokens; offset += ws.max_tokens) {
    MoeChunk chunk{offset, std::min(ws.max_tokens, tokens - offset), &x, &out, routing,
                   profiling && launch_events == MoeLaunchEvents::every, profiling};
    // MoeRouter writes the pairs first for router logits (unless the strategy's FC1 routes them
    // itself, shared experts' slots too) and for shared experts' slots, and for a strategy that
    // does not route top-k ids itself.
    chunk.routing.routed = routing.logits ? !k.routes_logits(chunk.tokens, shape.top_k)
                                          : shape.top_k > shape.routed_k || !k.routes_topk();
    chunk.routing.route_bias = &router->bias();
    chunk.routing.route_scaling = router->scaling();
    call.chunk_strategies.emplace_back(to_string(k.id()));
    if (chunk.routing.routed) router->enqueue(queue, shape, weights, ws, chunk, call.launches, last);
    k.enqueue(queue, shape, weights, ws, chunk, call.launches, last);
  }
  call.done = last;
  return call;
}

MoeCall MoeLayer::enqueue_topk(const cl::Buffer& x, const cl::Buffer& topk_ids, const cl::Buffer& topk_weights,
                               const cl::Buffer& out, std::int64_t tokens, const std::vector<cl::Event>& wait) {
  MoeRoutingInput routing;
  routing.topk_ids = &topk_ids;
  routing.topk_weights = &topk_weights;
  MoeCall call = impl_->enqueue(x, out, tokens, wait, routing);
  call.topk_ids = topk_ids;
  return call;
}

MoeCall MoeLayer::enqueue_logits(const cl::Buffer& x, const cl::Buffer& router_logits, const cl::Buffer& out,
                                 std::int64_t tokens, const std::vector<cl::Event>& wait) {
  if (!impl_->config.logit_routing.unsupported.empty())
    fail("MoE: this layer cannot route router logits: {}; pass topk_ids and topk_weights (enqueue_topk)",
         impl_->config.logit_routing.unsupported);
  MoeRoutingInput routing;
  routing.logits = &router_logits;
  routing.renormalize = impl_->config.renormalize;
  return impl_->enqueue(x, out, tokens, wait, routing);
}

MoeStats MoeLayer::finish(const MoeCall& call) {
  Impl& m = *impl_;
  MoeStats stats;
  stats.tokens = call.tokens;
  if (call.tokens == 0) return stats;
  cl_int status[4] = {0, 0, 0, 0};
  const std::vector<cl::Event> wait{call.done};
  check_cl(opencl::enqueue_read(m.ctx.queue(), m.ws.status, true, 0, sizeof(status), status, &wait, nullptr),
           "MoE: reading the status words");
  const int k = m.shape.routed_k;  // status holds indices into the caller's topk_ids [T, k]
  if (status[0] != INT_MAX) {
    cl_int id = 0;
    if (call.topk_ids()) {
      check_cl(opencl::enqueue_read(m.ctx.queue(), call.topk_ids, true, static_cast<std::size_t>(status[0]) * 4, 4, &id,
                                    nullptr, nullptr),
               "MoE: reading the invalid topk id");
    }
    fail("MoE: topk_ids[{}, {}] = {} is outside [0, {}) (the number of global experts); the slot was skipped and "
         "the output of this call is invalid",
         status[0] / k, status[0] % k, id, m.shape.global_experts);
  }
  if (status[1] != INT_MAX)
    fail("MoE: the expert_map entry for topk_ids[{}, {}] is outside [-1, {})", status[1] / k, status[1] % k,
         m.shape.local_experts);
  stats.expert_passes = status[2];
  stats.local_pairs = status[3];
  const std::string first = call.chunk_strategies.empty() ? std::string() : call.chunk_strategies.front();
  stats.weight_bytes = static_cast<std::uint64_t>(stats.expert_passes) *
                       m.weights_bytes_of(first == to_string(MoeStrategy::split) ? MoeStrategy::split
                                          : first == to_string(MoeStrategy::mma) ? MoeStrategy::mma
                                                                                 : MoeStrategy::grouped);
  return stats;
}

MoeStats MoeLayer::forward_topk(const cl::Buffer& x, const cl::Buffer& topk_ids, const cl::Buffer& topk_weights,
                                const cl::Buffer& out, std::int64_t tokens) {
  return finish(enqueue_topk(x, topk_ids, topk_weights, out, tokens));
}

MoeStats MoeLayer::forward_logits(const cl::Buffer& x, const cl::Buffer& router_logits, const cl::Buffer& out,
                                  std::int64_t tokens) {
  return finish(enqueue_logits(x, router_logits, out, tokens));
}

std::int64_t MoeLayer::num_local_experts() const { return impl_->shape.local_experts; }
std::int64_t MoeLayer::num_global_experts() const { return impl_->shape.global_experts; }
std::int64_t MoeLayer::hidden() const { return impl_->shape.hidden; }
std::int64_t MoeLayer::intermediate() const { return impl_->shape.intermediate; }
int MoeLayer::top_k() const { return impl_->shape.routed_k; }
int MoeLayer::shared_experts() const { return impl_->shape.top_k - impl_->shape.routed_k; }
std::int64_t MoeLayer::max_tokens() const { return impl_->ws.max_tokens; }
const QuantScheme& MoeLayer::scheme() const { return impl_->config.scheme; }
std::uint64_t MoeLayer::expert_weight_bytes() const {
  return impl_->weights_bytes_of(impl_->selection.usable.front().id);
}
std::uint64_t MoeLayer::expert_weight_bytes_for(std::int64_t tokens) const {
  return impl_->weights_bytes_of(impl_->selection.for_tokens(tokens, impl_->shape.top_k).id);
}
std::vector<cl::Event> MoeCall::events() const {
  std::vector<cl::Event> set;
  for (const MoeLaunch& l : launches)
    if (l.event() != nullptr) set.push_back(l.event);
  return set;
}

void MoeLayer::set_launch_events(MoeLaunchEvents which) { impl_->launch_events = which; }
MoeLaunchEvents MoeLayer::launch_events() const { return impl_->launch_events; }
std::string MoeLayer::strategy_for(std::int64_t tokens) const {
  return to_string(impl_->selection.for_tokens(tokens, impl_->shape.top_k).id);
}
std::string MoeLayer::kernel_description(std::int64_t tokens) const {
  return impl_->selection.for_tokens(tokens, impl_->shape.top_k).describe();
}
int MoeLayer::tile_pairs_for(std::int64_t tokens) const {
  // Chunks hold at most max_tokens tokens: the pass of the first (largest) chunk.
  return impl_->kernels_for(tokens).pairs_per_pass(std::min(tokens, impl_->ws.max_tokens), impl_->shape.top_k);
}

}  // namespace fp4cl
