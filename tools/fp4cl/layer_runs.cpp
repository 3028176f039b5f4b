#include "layer_runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4cl/formats.hpp"
#include "reference/linear_reference.hpp"
#include "reference/moe_reference.hpp"
#include "support/check.hpp"

namespace fp4cl::cli {

namespace {

template <typename T>
cl::Buffer device_copy(const Context& ctx, const std::vector<T>& v, const char* what) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_ONLY | (v.empty() ? 0 : CL_MEM_COPY_HOST_PTR),
               std::max<std::size_t>(sizeof(T), v.size() * sizeof(T)), v.empty() ? nullptr : const_cast<T*>(v.data()),
               &err);
  check_cl(err, "allocating the {} buffer ({} bytes)", what, v.size() * sizeof(T));
  return b;
}

// Records one output's comparison: `allowed` is the error bound shown (the reference's bound, plus
// half an output ulp for a BF16 output), `accepted` the reference's verdict.
void record(CheckResult& r, std::size_t i, std::size_t cols, double device, double reference, double allowed,
            bool accepted) {
  ++r.checked;
  const double error = std::fabs(device - reference);
  double ratio = 0.0;
  if (std::isnan(reference) || std::isnan(device)) {
    ratio = std::isnan(reference) && std::isnan(device) ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (error > 0) {
    ratio = allowed > 0 ? error / allowed : std::numeric_limits<double>::infinity();
  }
  if (!accepted) ++r.outside;
  if (r.checked == 1 || ratio > r.worst_ratio) {
    r.worst_ratio = ratio;
    r.worst =
        fmt::format("y[{}, {}] = {:.9g}, reference {:.9g} ± {:.3g}", i / cols, i % cols, device, reference, allowed);
  }
}

}  // namespace

double LayerOutput::value(std::size_t i) const {
  return bf16 ? static_cast<double>(bf16_to_float(bf16_bits[i])) : static_cast<double>(f32[i]);
}

LayerOutput run_linear(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t tokens) {
  LayerOutput y;
  y.bf16 = layer.options().output == OutputType::bf16;
  if (y.bf16) {
    layer.run(x, tokens, y.bf16_bits);
  } else {
    layer.run(x, tokens, y.f32);
  }
  return y;
}

MoeRun run_moe(const Context& ctx, MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
               const MoeRoutingInput& routing, std::int64_t tokens) {
  MoeRun r;
  r.output.bf16 = output == MoeOutput::bf16;
  const auto n = static_cast<std::size_t>(tokens * layer.hidden());
  const cl::Buffer xb = device_copy(ctx, x, "x");
  cl_int err = CL_SUCCESS;
  const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(4, n * (r.output.bf16 ? 2 : 4)),
                       nullptr, &err);
  check_cl(err, "allocating the MoE output buffer ({} values)", n);
  if (routing.from_logits) {
    r.call = layer.enqueue_logits(xb, device_copy(ctx, routing.router_logits, "router_logits"), out, tokens);
  } else {
    r.call = layer.enqueue_topk(xb, device_copy(ctx, routing.topk_ids, "topk_ids"),
                                device_copy(ctx, routing.topk_weights, "topk_weights"), out, tokens);
  }
  r.stats = layer.finish(r.call);
  if (r.output.bf16) {
    r.output.bf16_bits.resize(n);
  } else {
    r.output.f32.resize(n);
  }
  if (n > 0) {
    void* host =
        r.output.bf16 ? static_cast<void*>(r.output.bf16_bits.data()) : static_cast<void*>(r.output.f32.data());
    check_cl(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * (r.output.bf16 ? 2 : 4), host),
             "reading the MoE output back");
  }
  return r;
}

std::string describe(const CheckResult& r) {
  const char* note = r.ambiguous_routing ? " (the routing of some token rests on keys closer than fp32 resolves: "
                                           "a device may route it otherwise)"
                                         : "";
  if (r.ok())
    return fmt::format("{} outputs within bounds, worst |error|/bound {:.3f}{}", r.checked, r.worst_ratio, note);
  return fmt::format("{} of {} outputs OUT OF BOUNDS, worst |error|/bound {:.3g} at {}{}", r.outside, r.checked,
                     r.worst_ratio, r.worst, note);
}

std::string describe(const MoeActivation& a) {
  if (a.kind == MoeActivation::Kind::swiglu) return "SwiGLU";
  return fmt::format("gpt-oss's clamped SwiGLU (alpha {}, limit {})", a.alpha, a.limit);
}

std::string describe(const MoeLogitRouting& r) {
  if (!r.unsupported.empty()) return fmt::format("not computed by fp4cl ({})", r.unsupported);
  std::string s = r.scoring == MoeLogitRouting::Scoring::sigmoid ? "sigmoid" : "softmax";
  if (r.groups > 1) s += fmt::format(", {} groups ({} kept)", r.groups, r.top_groups);
  if (!r.correction_bias.empty()) s += ", correction bias";
  if (r.scaling_factor != 1.0f) s += fmt::format(", × {}", r.scaling_factor);
  return s;
}

CheckResult check_linear(const QuantScheme& scheme, const Fp4Weight& weight, const std::vector<std::uint16_t>& x,
                         std::int64_t tokens, const LayerOutput& y, const std::vector<float>& bias) {
  const std::vector<reference::LinearOutput> ref =
      reference::LinearReference(scheme, weight, x.data(), tokens, bias).all();
  if (ref.size() != y.size()) fail("check: the layer wrote {} outputs, the reference has {}", y.size(), ref.size());
  CheckResult r;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double b = bias.empty() ? 0.0 : std::fabs(static_cast<double>(bias[i % static_cast<std::size_t>(weight.n)]));
    const double bound = reference::output_bound(ref[i], weight.k, b, y.bf16), d = y.value(i);
    record(r, i, static_cast<std::size_t>(weight.n), d, ref[i].y, bound, std::fabs(d - ref[i].y) <= bound);
  }
  return r;
}

CheckResult check_moe(const Fp4Experts& experts, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                      const MoeRoutingInput& routing, std::int64_t tokens, const LayerOutput& y) {
  reference::MoeReferenceOptions options;
  options.scheme = config.scheme;
  options.calibrated_fc2_input_scale = config.fc2_input_scale == MoeFc2InputScale::calibrated;
  options.expert_map = config.expert_map;
  options.activation = config.activation;
  const std::int64_t routed = experts.num_experts - config.shared_experts;
  const std::int64_t global = config.expert_map.empty() ? routed : static_cast<std::int64_t>(config.expert_map.size());
  const reference::MoeRouting route = reference::with_shared_experts(
      routing.from_logits
          ? reference::routing_from_logits(routing.router_logits, tokens, global, config.top_k, config.renormalize,
                                           config.logit_routing)
          : reference::routing_from_topk(routing.topk_ids, routing.topk_weights, tokens, config.top_k),
      static_cast<std::int32_t>(routed), config.shared_experts);
  const reference::MoeReferenceResult ref = reference::moe_reference(experts, options, x, route);
  if (ref.value.size() != y.size())
    fail("check: the layer wrote {} outputs, the reference has {}", y.size(), ref.value.size());
  CheckResult r;
  r.ambiguous_routing = route.ambiguous;
  for (std::size_t i = 0; i < ref.value.size(); ++i) {
    const double v = ref.value[i], b = ref.bound[i], d = y.value(i);
    // BF16: the reference accepts the BF16 roundings of v ± b, within about half a BF16 ulp more.
    const double magnitude = std::fabs(v) + b;
    const double half_ulp = magnitude > 0 ? std::ldexp(1.0, std::ilogb(magnitude) - 8) : 0x1p-134;
    const bool accepted =
        y.bf16 ? reference::accepts_bf16(ref, i, y.bf16_bits[i]) : reference::accepts_fp32(ref, i, y.f32[i]);
    record(r, i, static_cast<std::size_t>(experts.hidden), d, v, y.bf16 ? b + half_ulp : b, accepted);
  }
  return r;
}

}  // namespace fp4cl::cli
