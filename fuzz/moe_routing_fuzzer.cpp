// libFuzzer target: the routing inputs of the MoE layer — expert_map, top_k, topk_ids,
// topk_weights and router logits — taken from the fuzzer's bytes (NaN, Inf, negative and
// out-of-range ids included).
//   Host (every input): the expert-map validation (resolve_expert_map), the reference routing
//   (routing_from_topk / routing_from_logits) and the scalar reference layer over small fixed
//   experts: each returns or throws fp4cl::Error, and an id outside [0, E_global) or an invalid
//   map is always refused.
//   Logit routings (MoeLogitRouting) with groups, bias and scaling from the input: the
//   reference routes or throws fp4cl::Error, and a routing it accepts chooses distinct experts
//   in range.
//   Device (when an OpenCL device opens; FP4CL_FUZZ_MOE_DEVICE=0 turns it off): the same ids and
//   weights, or logits, through four fixed layers (NVFP4 W4A16 with every expert local; NVFP4
//   W4A4 with an expert_map sharding 8 global experts onto 4; NVFP4 W4A16 with DeepSeek's gate:
//   sigmoid, 2 groups of 2 with 1 kept, a bias, × 2.5; the same with softmax scores, no bias,
//   × 0.5): an invalid id is reported as fp4cl::Error, never read; otherwise every output element
//   is one the reference accepts (for the grouped routings, where their routing is not ambiguous).
//   Logits of the local and gated layers' kind may instead go through the same routings on the
//   mma strategy (experts of H = I = 64, each token's 32 values twice), whose FC1 routes the
//   logits of one-token and two-token chunks itself (moe_route_token.cl in moe_mma.cl) and whose
//   router kernel routes longer ones: a byte after the logits chooses it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe.hpp"
#include "fuzz_support.hpp"
#include "layers/moe_expert_map.hpp"
#include "reference/moe_reference.hpp"

namespace {

using fp4cl::fuzz::accepts;
using fp4cl::fuzz::ByteReader;
using fp4cl::fuzz::finding;
namespace ref = fp4cl::reference;

constexpr std::int64_t kExperts = 4, kHidden = 32, kInter = 32;
constexpr std::int64_t kMmaWidth = 64;  // H and I of the mma layers' experts (the mma strategy's K is a multiple of 64)
constexpr fp4cl::QuantScheme kW4A16{fp4cl::WeightFormat::nvfp4, fp4cl::Activations::bf16};
constexpr fp4cl::QuantScheme kW4A4{fp4cl::WeightFormat::nvfp4, fp4cl::Activations::fp4_dynamic};

// Fixed NVFP4 experts: random codes, block scales of few bits, power-of-two global scales.
fp4cl::Fp4Experts make_experts(std::int64_t hidden, std::int64_t inter) {
  fp4cl::Fp4Experts e;
  e.num_experts = kExperts;
  e.hidden = hidden;
  e.intermediate = inter;
  std::uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u, static_cast<std::uint8_t>(state >> 24); };
  e.w13_packed.resize(static_cast<std::size_t>(kExperts * 2 * inter * hidden / 2));
  e.w2_packed.resize(static_cast<std::size_t>(kExperts * hidden * inter / 2));
  e.w13_scales.resize(static_cast<std::size_t>(kExperts * 2 * inter * hidden / 16));
  e.w2_scales.resize(static_cast<std::size_t>(kExperts * hidden * inter / 16));
  for (auto& b : e.w13_packed) b = next();
  for (auto& b : e.w2_packed) b = next();
  for (auto& s : e.w13_scales) s = static_cast<std::uint8_t>(0x30 + next() % 16);  // E4M3 0.5 .. 0.94
  for (auto& s : e.w2_scales) s = static_cast<std::uint8_t>(0x30 + next() % 16);
  for (std::int64_t i = 0; i < kExperts; ++i) {
    e.w13_global_scale.push_back(1.0f / 64);
    e.w13_global_scale.push_back(1.0f / 32);
    e.w2_global_scale.push_back(1.0f / 128);
  }
  e.set_input_scales_from_quant(std::vector<float>(kExperts, 64.0f), std::vector<float>(kExperts, 1.0f));
  return e;
}
const fp4cl::Fp4Experts& experts() {
  static const fp4cl::Fp4Experts x = make_experts(kHidden, kInter);
  return x;
}
const fp4cl::Fp4Experts& mma_experts() {
  static const fp4cl::Fp4Experts x = make_experts(kMmaWidth, kMmaWidth);
  return x;
}

// The four device layers; null when no device opens (or FP4CL_FUZZ_MOE_DEVICE=0).
struct DeviceLayers {
  fp4cl::Context ctx;
  fp4cl::MoeLayer local, sharded, gated, grouped_softmax;
};
const std::vector<std::int32_t> kShardMap = {-1, 0, -1, 1, 2, -1, 3, -1};
fp4cl::MoeLogitRouting gate() {
  fp4cl::MoeLogitRouting r;
  r.scoring = fp4cl::MoeLogitRouting::Scoring::sigmoid;
  r.groups = 2;
  r.top_groups = 1;
  r.correction_bias = {0.25f, -0.125f, 0.0f, 0.5f};
  r.scaling_factor = 2.5f;
  return r;
}
// Softmax scores in groups (DeepSeek-V2's group-limited greedy), scaled.
fp4cl::MoeLogitRouting softmax_groups() {
  fp4cl::MoeLogitRouting r;
  r.groups = 2;
  r.top_groups = 1;
  r.scaling_factor = 0.5f;
  return r;
}

// The local layer's configuration, the others' starting point.
fp4cl::MoeConfig local_config() {
  fp4cl::MoeConfig c;
  c.scheme = kW4A16;
  c.top_k = 2;
  c.max_tokens = 4;  // 5+ tokens run in chunks
  return c;
}

DeviceLayers* device_layers() {
  static std::unique_ptr<DeviceLayers> layers = []() -> std::unique_ptr<DeviceLayers> {
    const char* env = std::getenv("FP4CL_FUZZ_MOE_DEVICE");
    if (env && std::string(env) == "0") return nullptr;
    std::optional<fp4cl::Context> ctx;
    if (!accepts([&] { ctx = fp4cl::Context::create(); })) return nullptr;
    const fp4cl::MoeConfig local = local_config();
    fp4cl::MoeConfig sharded = local;
    sharded.scheme = kW4A4;
    sharded.top_k = 3;
    sharded.expert_map = kShardMap;
    sharded.renormalize = false;
    fp4cl::MoeConfig gated = local;
    gated.logit_routing = gate();
    fp4cl::MoeConfig grouped_softmax = local;
    grouped_softmax.logit_routing = softmax_groups();
    return std::unique_ptr<DeviceLayers>(new DeviceLayers{*ctx, fp4cl::MoeLayer::create(*ctx, experts(), local),
                                                          fp4cl::MoeLayer::create(*ctx, experts(), sharded),
                                                          fp4cl::MoeLayer::create(*ctx, experts(), gated),
                                                          fp4cl::MoeLayer::create(*ctx, experts(), grouped_softmax)});
  }();
  return layers.get();
}

// The local and gated layers' routings on the mma strategy, made at the first input that asks
// for them; null where the device refuses them (those inputs take the other layers).
struct MmaLayers {
  fp4cl::MoeLayer softmax, gated;
};
MmaLayers* mma_layers(DeviceLayers& d) {
  static std::unique_ptr<MmaLayers> layers = [&d]() -> std::unique_ptr<MmaLayers> {
    fp4cl::MoeConfig softmax = local_config();
    softmax.kernel = "mma";
    fp4cl::MoeConfig gated = softmax;
    gated.logit_routing = gate();
    std::unique_ptr<MmaLayers> l;
    accepts([&] {
      l.reset(new MmaLayers{fp4cl::MoeLayer::create(d.ctx, mma_experts(), softmax),
                            fp4cl::MoeLayer::create(d.ctx, mma_experts(), gated)});
    });
    return l;
  }();
  return layers.get();
}

template <typename T>
cl::Buffer upload(const fp4cl::Context& ctx, const std::vector<T>& v) {
  const std::size_t bytes = std::max<std::size_t>(4, v.size() * sizeof(T));
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE, bytes);
  if (!v.empty()) ctx.queue().enqueueWriteBuffer(b, CL_TRUE, 0, v.size() * sizeof(T), v.data());
  return b;
}

bool all_finite(const ref::MoeReferenceResult& r) {
  for (std::size_t i = 0; i < r.value.size(); ++i)
    if (!std::isfinite(r.value[i]) || !std::isfinite(r.bound[i])) return false;
  return true;
}

// Runs one forward on the device and checks it against the reference.
void device_check(ByteReader& in, const std::vector<std::uint16_t>& x, std::int64_t tokens) {
  DeviceLayers* d = device_layers();
  if (!d) return;
  const bool use_sharded = in.u8() & 1, use_logits = in.u8() & 1, use_gate = use_logits && !use_sharded && in.u8() & 1;
  // Logits (the local and grouped layers route 4 global experts, the sharded one 8), then, in a
  // byte after them so that inputs saved before it came keep their meaning, which grouped
  // routing: DeepSeek's gate, or softmax in groups.
  std::vector<float> logits;
  if (use_logits) {
    const std::int64_t experts_a_token = (use_sharded ? d->sharded : d->local).num_global_experts();
    for (std::int64_t i = 0; i < tokens * experts_a_token; ++i)
      logits.push_back(in.u8() & 1 ? in.f32() : in.grid(-8, 8, 0.25f));
  }
  const bool use_softmax_groups = use_gate && in.u8() % 4 == 3;
  // Then, in a byte of its own (0 in inputs saved before it), the mma strategy.
  MmaLayers* mma = use_logits && !use_sharded && !use_softmax_groups && in.u8() % 4 == 2 ? mma_layers(*d) : nullptr;
  fp4cl::MoeLayer& layer = mma              ? (use_gate ? mma->gated : mma->softmax)
                           : use_sharded    ? d->sharded
                           : use_softmax_groups ? d->grouped_softmax
                           : use_gate       ? d->gated
                                            : d->local;
  const char* layer_name = mma                  ? (use_gate ? "mma gate" : "mma softmax")
                           : use_sharded        ? "sharded"
                           : use_softmax_groups ? "softmax groups"
                           : use_gate           ? "gate"
                                                : "local";
  // The mma layers' tokens: each token's 32 values twice.
  const fp4cl::Fp4Experts& ex = mma ? mma_experts() : experts();
  std::vector<std::uint16_t> x_mma;
  if (mma)
    for (std::int64_t i = 0; i < tokens * kMmaWidth; ++i)
      x_mma.push_back(x[static_cast<std::size_t>(i / kMmaWidth * kHidden + i % kHidden)]);
  const std::vector<std::uint16_t>& xs = mma ? x_mma : x;
  const int k = layer.top_k();
  const std::int64_t global = layer.num_global_experts();
  ref::MoeReferenceOptions opts;
  opts.scheme = layer.scheme();
  if (use_sharded) opts.expert_map = kShardMap;

  std::optional<ref::MoeRouting> routing;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  if (use_logits) {
    routing = use_gate ? ref::routing_from_logits(logits, tokens, global, k, true,
                                                  use_softmax_groups ? softmax_groups() : gate())
                       : ref::routing_from_logits(logits, tokens, global, k, !use_sharded);
  } else {
    for (std::int64_t i = 0; i < tokens * k; ++i) {
      ids.push_back(in.u8() < 16 ? static_cast<std::int32_t>(in.u32()) : static_cast<std::int32_t>(in.range(-1, global)));
      weights.push_back(in.u8() < 16 ? in.f32() : in.grid(0, 8, 0.125f));
    }
    routing = ref::routing_from_topk(ids, weights, tokens, k);
  }
  std::optional<ref::MoeReferenceResult> expected;
  const bool valid = accepts([&] { expected = ref::moe_reference(ex, opts, xs, *routing); });

  const fp4cl::Context& ctx = d->ctx;
  const cl::Buffer xb = upload(ctx, xs);
  const cl::Buffer out =
      upload(ctx, std::vector<std::uint16_t>(static_cast<std::size_t>(tokens * ex.hidden), 0x7FC1));
  const bool ran = accepts([&] {
    if (use_logits) {
      layer.forward_logits(xb, upload(ctx, logits), out, tokens);
    } else {
      layer.forward_topk(xb, upload(ctx, ids), upload(ctx, weights), out, tokens);
    }
  });
  if (ran != valid) finding(valid ? "the device refused routing the reference accepts" : "the device accepted an invalid id");
  if (!ran || !all_finite(*expected) || routing->ambiguous) return;
  std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens * ex.hidden));
  if (!y.empty()) ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, y.size() * 2, y.data());
  for (std::size_t i = 0; i < y.size(); ++i)
    if (!ref::accepts_bf16(*expected, i, y[i]))
      finding("device output " + std::to_string(i) + " outside the reference's bound (" +
              (use_logits ? "logits, " : "topk, ") + layer_name + ")");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteReader in(data, size);

  // The expert map: empty, or E_global entries from the input.
  const std::int64_t global = in.range(0, 9);
  std::vector<std::int32_t> map;
  for (std::int64_t i = 0; i < global; ++i)
    map.push_back(in.u8() < 8 ? static_cast<std::int32_t>(in.u32()) : static_cast<std::int32_t>(in.range(-2, kExperts)));
  std::optional<std::vector<std::int32_t>> resolved;
  accepts([&] { resolved = fp4cl::resolve_expert_map(map, kExperts); });
  if (resolved) {
    if (resolved->size() != (map.empty() ? static_cast<std::size_t>(kExperts) : map.size()))
      finding("resolve_expert_map changed the number of global experts");
    std::vector<int> seen(kExperts, 0);
    for (std::int32_t m : *resolved) {
      if (m < -1 || m >= kExperts) finding("resolve_expert_map accepted an entry out of range");
      if (m >= 0 && seen[static_cast<std::size_t>(m)]++) finding("resolve_expert_map accepted a local expert twice");
    }
  }
  const std::int64_t e_global = resolved ? static_cast<std::int64_t>(resolved->size()) : kExperts;

  // Routing: precomputed ids and weights (any values), or logits.
  const auto top_k = static_cast<int>(in.range(0, 9));
  const std::int64_t tokens = in.range(0, 6);
  std::vector<std::int32_t> ids;
  std::vector<float> weights, logits;
  bool ids_valid = true;
  for (std::int64_t i = 0; i < tokens * top_k; ++i) {
    ids.push_back(in.u8() < 16 ? static_cast<std::int32_t>(in.u32()) : static_cast<std::int32_t>(in.range(-1, e_global)));
    ids_valid = ids_valid && ids.back() >= 0 && ids.back() < e_global;
    weights.push_back(in.u8() < 16 ? in.f32() : in.grid(0, 8, 0.125f));
  }
  for (std::int64_t i = 0; i < tokens * e_global; ++i) logits.push_back(in.u8() < 16 ? in.f32() : in.grid(-8, 8, 0.25f));
  std::vector<std::uint16_t> x;
  for (std::int64_t i = 0; i < tokens * kHidden; ++i) {
    const float v = in.grid(-8, 8, 0.125f);
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    x.push_back(static_cast<std::uint16_t>(bits >> 16));
  }

  ref::MoeReferenceOptions opts;
  opts.scheme = in.u8() & 1 ? kW4A4 : kW4A16;
  opts.expert_map = map;
  std::optional<ref::MoeRouting> routing;
  accepts([&] { routing = ref::routing_from_topk(ids, weights, tokens, top_k); });
  if (routing) {
    const bool ok = accepts([&] { (void)ref::moe_reference(experts(), opts, x, *routing); });
    if (ok && (!resolved || !ids_valid)) finding("the reference accepted an invalid map or id");
  }
  std::optional<ref::MoeRouting> from_logits;
  const bool renormalize = in.u8() & 1;
  if (accepts([&] { from_logits = ref::routing_from_logits(logits, tokens, e_global, top_k, renormalize); })) {
    for (std::size_t i = 0; i < from_logits->ids.size(); ++i) {
      const std::int32_t id = from_logits->ids[i];
      if (id < 0 || id >= e_global) finding("routing_from_logits chose an expert out of range");
      for (std::size_t j = i - i % static_cast<std::size_t>(top_k); j < i; ++j)
        if (from_logits->ids[j] == id) finding("routing_from_logits chose an expert twice for one token");
    }
    if (resolved) accepts([&] { (void)ref::moe_reference(experts(), opts, x, *from_logits); });
  }

  // A logit routing from the input: routed, or refused with fp4cl::Error.
  fp4cl::MoeLogitRouting grouped;
  grouped.scoring = in.u8() & 1 ? fp4cl::MoeLogitRouting::Scoring::sigmoid : fp4cl::MoeLogitRouting::Scoring::softmax;
  grouped.groups = static_cast<int>(in.range(0, 5));
  grouped.top_groups = static_cast<int>(in.range(0, 5));
  const std::int64_t biases = in.u8() & 1 ? in.range(e_global - 1, e_global + 2) : 0;
  for (std::int64_t e = 0; e < biases; ++e)
    grouped.correction_bias.push_back(in.u8() < 16 ? in.f32() : in.grid(-1, 1, 0.125f));
  grouped.scaling_factor = in.u8() < 16 ? in.f32() : in.grid(0, 4, 0.25f);
  std::optional<ref::MoeRouting> gated;
  if (accepts([&] { gated = ref::routing_from_logits(logits, tokens, e_global, top_k, renormalize, grouped); })) {
    for (std::size_t i = 0; i < gated->ids.size(); ++i) {
      const std::int32_t id = gated->ids[i];
      if (id < 0 || id >= e_global) finding("a grouped routing chose an expert out of range");
      for (std::size_t j = i - i % static_cast<std::size_t>(top_k); j < i; ++j)
        if (gated->ids[j] == id) finding("a grouped routing chose an expert twice for one token");
    }
  }

  // The same kind of routing through the device layers.
  device_check(in, x, tokens);
  return 0;
}
