#include "reference_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/formats.cl"
#include "fp4cl/error.hpp"
#include "reference/linear_reference.hpp"
#include "reference/moe_reference.hpp"

namespace fp4cl::bench {

std::string check_linear_output(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                std::int64_t m, const std::vector<float>& y, bool bf16_output, int samples) {
  const reference::LinearReference ref(scheme, w, x.data(), m);
  std::vector<std::pair<std::int64_t, std::int64_t>> picks = {{0, 0}, {0, w.n - 1}, {m - 1, 0}, {m - 1, w.n - 1}};
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> token(0, m - 1), row(0, w.n - 1);
  for (int s = 0; s < samples; ++s) picks.emplace_back(token(rng), row(rng));
  double worst = 0.0;
  for (const auto& [i, r] : picks) {
    const reference::LinearOutput o = ref.at(i, r);
    // fp32 accumulation of k + 2 terms (W4A16: on the activations' integer grid or not), and the
    // BF16 output's rounding.
    const double bound = reference::output_bound(o, w.k, 0.0, bf16_output);
    const double got = y[static_cast<std::size_t>(i * w.n + r)];
    const double err = std::fabs(got - o.y);
    if (!(err <= bound))
      throw Error(fmt::format("check against the reference failed: y[{}, {}] = {}, reference {} (|error| {} > bound {})",
                              i, r, got, o.y, err, bound));
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  return fmt::format("ok: {} outputs, worst {:.2f} of bound", picks.size(), worst);
}

MoeCheckReference moe_check_reference(const Fp4Experts& experts, const MoeConfig& config,
                                      const std::vector<std::uint16_t>& x, const reference::MoeRouting& routing,
                                      std::int64_t tokens) {
  const std::int64_t H = experts.hidden;
  const int k = config.top_k;
  MoeCheckReference c;
  c.hidden = H;
  c.picked = {0};
  if (tokens > 1) c.picked.push_back(tokens - 1);
  std::vector<std::uint16_t> xs;
  reference::MoeRouting picked;
  picked.tokens = static_cast<std::int64_t>(c.picked.size());
  picked.top_k = k;
  picked.weight_rel_error = routing.weight_rel_error;
  picked.weight_abs_error = routing.weight_abs_error;
  for (std::int64_t t : c.picked) {
    xs.insert(xs.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
    picked.ids.insert(picked.ids.end(), routing.ids.begin() + t * k, routing.ids.begin() + (t + 1) * k);
    picked.weights.insert(picked.weights.end(), routing.weights.begin() + t * k, routing.weights.begin() + (t + 1) * k);
  }
  // The shared experts' slots (weight 1) after the routed ones.
  picked = reference::with_shared_experts(
      picked, static_cast<std::int32_t>(experts.num_experts - config.shared_experts), config.shared_experts);
  reference::MoeReferenceOptions opt;
  opt.scheme = config.scheme;
  opt.calibrated_fc2_input_scale = config.fc2_input_scale == MoeFc2InputScale::calibrated;
  opt.expert_map = config.expert_map;
  opt.activation = config.activation;
  c.ref = reference::moe_reference(experts, opt, xs, picked);
  return c;
}

MoeCheckReference moe_check_reference(const Fp4Experts& experts, const MoeConfig& config,
                                      const std::vector<std::uint16_t>& x, const Routing& routing,
                                      std::int64_t tokens) {
  return moe_check_reference(experts, config, x,
                             reference::routing_from_topk(routing.ids, routing.weights, tokens, config.top_k), tokens);
}

std::string check_moe_output(const MoeCheckReference& c, const std::vector<std::uint16_t>& out_bf16,
                             const std::vector<float>& out_fp32) {
  const std::int64_t H = c.hidden;
  const auto n = static_cast<std::int64_t>(c.picked.size());
  std::int64_t checked = 0;
  for (std::int64_t p = 0; p < n; ++p) {
    for (std::int64_t h = 0; h < H; ++h) {
      const auto ri = static_cast<std::size_t>(p * H + h);
      const auto di = static_cast<std::size_t>(c.picked[static_cast<std::size_t>(p)] * H + h);
      const bool ok = out_bf16.empty() ? reference::accepts_fp32(c.ref, ri, out_fp32[di])
                                       : reference::accepts_bf16(c.ref, ri, out_bf16[di]);
      if (!ok)
        throw Error(fmt::format("check against the reference failed: out[{}, {}] = {}, reference {} ± {}",
                                c.picked[static_cast<std::size_t>(p)], h,
                                out_bf16.empty() ? static_cast<double>(out_fp32[di]) : bf16_to_float(out_bf16[di]),
                                c.ref.value[ri], c.ref.bound[ri]));
      ++checked;
    }
  }
  return fmt::format("ok: {} outputs of {} tokens", checked, n);
}

std::string check_moe_output(const Fp4Experts& experts, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                             const Routing& routing, std::int64_t tokens, const std::vector<std::uint16_t>& out_bf16,
                             const std::vector<float>& out_fp32) {
  return check_moe_output(moe_check_reference(experts, config, x, routing, tokens), out_bf16, out_fp32);
}

}  // namespace fp4cl::bench
