#include "layers/moe_experts_check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "prepare/fp4_weight_checks.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

void check_size(const char* tensor, std::size_t actual, std::int64_t expected, const char* shape) {
  if (static_cast<std::int64_t>(actual) != expected)
    fail("MoE experts: {} has {} elements, expected {} ({})", tensor, actual, expected, shape);
}

void check_positive_scales(const char* tensor, const std::vector<float>& v, std::int64_t expected, const char* shape) {
  check_size(tensor, v.size(), expected, shape);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || !(v[i] > 0.0f))
      fail("MoE experts: {}[{}] = {}: a global scale must be finite and > 0", tensor, i, v[i]);
  }
}

// Biases [E, cols]: every value finite.
void check_finite_biases(const char* tensor, const std::vector<float>& v, std::int64_t cols) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]))
      fail("MoE experts: {}[{}, {}] = {}: a bias must be finite", tensor, static_cast<std::int64_t>(i) / cols,
           static_cast<std::int64_t>(i) % cols, v[i]);
  }
}

// Block-scale bytes [E, rows, cols]: no NaN encodings.
void check_scale_bytes(const char* tensor, const std::vector<std::uint8_t>& s, WeightFormat format, std::int64_t rows,
                       std::int64_t cols) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned b = s[i];
    const bool nan = format == WeightFormat::nvfp4 ? (b & 0x7Fu) == 0x7Fu : b == 0xFFu;
    if (nan) {
      const auto idx = static_cast<std::int64_t>(i);
      fail("MoE experts: {}[{}, {}, {}] = 0x{:02X} is a NaN {} block scale", tensor, idx / (rows * cols),
           idx / cols % rows, idx % cols, b, format == WeightFormat::nvfp4 ? "E4M3" : "E8M0");
    }
  }
}

// Each expert's activation scale in both directions: reciprocals up to rounding.
void check_scale_pairs(const char* matrix, const std::vector<float>& input_scale,
                       const std::vector<float>& input_global_scale) {
  for (std::size_t e = 0; e < input_scale.size(); ++e)
    check_activation_scale_pair(input_scale[e], input_global_scale[e],
                                fmt::format("MoE experts: expert {}'s {}", e, matrix));
}

}  // namespace

void check_moe_experts(const Fp4Experts& ex, const QuantScheme& scheme, bool calibrated_fc2_input_scale) {
  if (ex.format != scheme.weight)
    fail("MoE: the experts are {} but the scheme is {}", to_string(ex.format), scheme.name());
  const std::int64_t block = block_size(ex.format);
  const std::int64_t E = ex.num_experts, H = ex.hidden, I = ex.intermediate;
  if (E < 1) fail("MoE experts: num_experts = {}, expected at least 1", E);
  if (H < block || H % block != 0)
    fail("MoE experts: hidden = {} must be a positive multiple of the {} block size {}", H, to_string(ex.format), block);
  if (I < block || I % block != 0)
    fail("MoE experts: intermediate = {} must be a positive multiple of the {} block size {}", I,
         to_string(ex.format), block);
  check_size("w13_packed", ex.w13_packed.size(), E * 2 * I * H / 2, "[E, 2I, H/2]");
  check_size("w13_scales", ex.w13_scales.size(), E * 2 * I * H / block, "[E, 2I, H/block]");
  check_size("w2_packed", ex.w2_packed.size(), E * H * I / 2, "[E, H, I/2]");
  check_size("w2_scales", ex.w2_scales.size(), E * H * I / block, "[E, H, I/block]");
  check_scale_bytes("w13_scales", ex.w13_scales, ex.format, 2 * I, H / block);
  check_scale_bytes("w2_scales", ex.w2_scales, ex.format, H, I / block);
  if (ex.w13_bias.empty() != ex.w2_bias.empty())
    fail("MoE experts: w13_bias has {} elements and w2_bias {}: give both biases or neither", ex.w13_bias.size(),
         ex.w2_bias.size());
  if (!ex.w13_bias.empty()) {
    check_size("w13_bias", ex.w13_bias.size(), E * 2 * I, "[E, 2I]");
    check_size("w2_bias", ex.w2_bias.size(), E * H, "[E, H]");
    check_finite_biases("w13_bias", ex.w13_bias, 2 * I);
    check_finite_biases("w2_bias", ex.w2_bias, H);
  }
  if (ex.format == WeightFormat::nvfp4) {
    check_positive_scales("w13_global_scale", ex.w13_global_scale, 2 * E, "[E, 2] {gate, up}");
    check_positive_scales("w2_global_scale", ex.w2_global_scale, E, "[E]");
    if (!scheme.w4a16()) {
      check_positive_scales("w13_input_global_scale", ex.w13_input_global_scale, E, "[E]");
      check_positive_scales("w13_input_scale", ex.w13_input_scale, E, "[E]");
      check_scale_pairs("w13", ex.w13_input_scale, ex.w13_input_global_scale);
      if (calibrated_fc2_input_scale) {
        check_positive_scales("w2_input_global_scale", ex.w2_input_global_scale, E, "[E]");
        check_positive_scales("w2_input_scale", ex.w2_input_scale, E, "[E]");
        check_scale_pairs("w2", ex.w2_input_scale, ex.w2_input_global_scale);
      }
    }
  } else {
    for (const auto* v : {&ex.w13_global_scale, &ex.w2_global_scale}) {
      for (float s : *v) {
        if (s != 1.0f) fail("MoE experts: MXFP4 has no global scale, but a global scale of {} was given", s);
      }
    }
  }
}

void check_moe_activation(const MoeActivation& act) {
  switch (act.kind) {
    case MoeActivation::Kind::swiglu:
      return;
    case MoeActivation::Kind::swiglu_clamped:
      if (!std::isfinite(act.alpha) || !(act.alpha > 0.0f))
        fail("MoE: the clamped SwiGLU's alpha = {} must be finite and > 0", act.alpha);
      if (!std::isfinite(act.limit) || !(act.limit > 0.0f))
        fail("MoE: the clamped SwiGLU's limit = {} must be finite and > 0", act.limit);
      return;
  }
  fail("MoE: unknown activation kind {}", static_cast<int>(act.kind));
}

void check_moe_logit_routing(const MoeLogitRouting& r, std::int64_t global_experts, int top_k) {
  if (r.scoring != MoeLogitRouting::Scoring::softmax && r.scoring != MoeLogitRouting::Scoring::sigmoid)
    fail("MoE: MoeConfig::logit_routing.scoring = {} is neither softmax nor sigmoid", static_cast<int>(r.scoring));
  if (r.groups < 1 || r.groups > kMaxRoutingGroups || global_experts % r.groups != 0)
    fail("MoE: MoeConfig::logit_routing.groups = {} must divide the {} global experts and be in [1, {}]", r.groups,
         global_experts, kMaxRoutingGroups);
  if (r.top_groups < 1 || r.top_groups > r.groups)
    fail("MoE: MoeConfig::logit_routing.top_groups = {} must be in [1, groups = {}]", r.top_groups, r.groups);
  const std::int64_t per_group = global_experts / r.groups;
  if (top_k > r.top_groups * per_group)
    fail("MoE: top_k = {} exceeds the {} experts that logit_routing's top_groups = {} groups of {} leave", top_k,
         r.top_groups * per_group, r.top_groups, per_group);
  if (!r.correction_bias.empty()) {
    if (static_cast<std::int64_t>(r.correction_bias.size()) != global_experts)
      fail("MoE: MoeConfig::logit_routing.correction_bias has {} values; expected one per global expert ({})",
           r.correction_bias.size(), global_experts);
    for (std::size_t e = 0; e < r.correction_bias.size(); ++e)
      if (!std::isfinite(r.correction_bias[e]))
        fail("MoE: MoeConfig::logit_routing.correction_bias[{}] = {} is not finite", e, r.correction_bias[e]);
    if (r.groups > 1 && per_group < 2)
      fail("MoE: logit_routing ranks groups by their two best keys where there is a correction bias, but its "
           "groups = {} leave {} expert a group",
           r.groups, per_group);
  }
  if (!std::isfinite(r.scaling_factor) || !(r.scaling_factor > 0.0f))
    fail("MoE: MoeConfig::logit_routing.scaling_factor = {} must be finite and > 0", r.scaling_factor);
  if (!r.plain_softmax() && r.unsupported.empty() && global_experts > kMaxGroupedRoutingExperts)
    fail("MoE: logit_routing other than plain softmax serves at most {} global experts, not {}",
         kMaxGroupedRoutingExperts, global_experts);
}

}  // namespace fp4cl
