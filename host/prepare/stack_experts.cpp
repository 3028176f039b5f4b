// Stacking expert projections into Fp4Experts.
#include "prepare/stack_experts.hpp"

#include <cstdint>
#include <vector>

#include "prepare/global_scales.hpp"
#include "prepare/prepare_linear.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

// Replaces every entry of `scales` by the widest of them (the shared activation scale).
void share_widest(std::vector<GlobalScale>& scales) {
  if (scales.empty()) return;
  GlobalScale widest = scales.front();
  for (const GlobalScale& s : scales) widest = wider(widest, s);
  for (GlobalScale& s : scales) s = widest;
}

void check_same_shape(const QuantizedModule& m, const QuantizedModule& first, std::int64_t rows, std::int64_t cols) {
  if (m.n != rows || m.k != cols || m.scheme != first.scheme) {
    fail("{}: weight [{}, {}] ({}); expected [{}, {}] ({}) like the other experts of its layer", m.describe(), m.n, m.k,
         m.scheme.name(), rows, cols, first.scheme.name());
  }
}

}  // namespace

Fp4Experts stack_experts(const std::vector<ExpertModules>& experts, ExpertInputScales input_scales) {
  if (experts.empty()) fail("stack_experts: an MoE layer needs at least one expert");
  const QuantizedModule& first = *experts.front().gate;
  const QuantScheme scheme = first.scheme;
  const std::int64_t block = scheme.block_size();
  const std::int64_t E = static_cast<std::int64_t>(experts.size());
  const std::int64_t I = first.n;
  const std::int64_t H = first.k;

  Fp4Experts out;
  out.format = scheme.weight;
  out.num_experts = E;
  out.hidden = H;
  out.intermediate = I;
  const auto sz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  out.w13_packed.resize(sz(E * 2 * I * H / 2));
  out.w13_scales.resize(sz(E * 2 * I * (H / block)));
  out.w2_packed.resize(sz(E * H * I / 2));
  out.w2_scales.resize(sz(E * H * (I / block)));
  out.w13_global_scale.resize(sz(2 * E));
  out.w2_global_scale.resize(sz(E));

  std::vector<GlobalScale> fc1_input(sz(E)), fc2_input(sz(E));
  for (std::int64_t e = 0; e < E; ++e) {
    const ExpertModules& x = experts[sz(e)];
    check_same_shape(*x.gate, first, I, H);
    check_same_shape(*x.up, first, I, H);
    check_same_shape(*x.down, first, H, I);
    // [gate; up]: gate rows first.
    const std::int64_t half_packed = I * H / 2, half_scales = I * (H / block);
    copy_codes_and_scales(*x.gate, &out.w13_packed[sz(e * 2 * half_packed)], &out.w13_scales[sz(e * 2 * half_scales)]);
    copy_codes_and_scales(*x.up, &out.w13_packed[sz((e * 2 + 1) * half_packed)],
                          &out.w13_scales[sz((e * 2 + 1) * half_scales)]);
    copy_codes_and_scales(*x.down, &out.w2_packed[sz(e * H * I / 2)], &out.w2_scales[sz(e * H * (I / block))]);
    out.w13_global_scale[sz(2 * e)] = weight_global_scale(*x.gate).dequant;
    out.w13_global_scale[sz(2 * e + 1)] = weight_global_scale(*x.up).dequant;
    out.w2_global_scale[sz(e)] = weight_global_scale(*x.down).dequant;
    fc1_input[sz(e)] = wider(input_global_scale(*x.gate), input_global_scale(*x.up));
    fc2_input[sz(e)] = input_global_scale(*x.down);
  }
  // Biases: every projection of every expert has one, or none has (gpt-oss's experts have them).
  const QuantizedModule* with_bias = nullptr;
  const QuantizedModule* without_bias = nullptr;
  for (const ExpertModules& x : experts)
    for (const QuantizedModule* m : {x.gate, x.up, x.down}) (m->bias ? with_bias : without_bias) = m;
  if (with_bias && without_bias)
    fail("{} has a bias ('{}') but {} has none: an MoE layer's expert projections all have biases or none has",
         with_bias->describe(), with_bias->bias->name(), without_bias->describe());
  if (with_bias) {
    for (const ExpertModules& x : experts) {
      for (const QuantizedModule* m : {x.gate, x.up}) {
        const std::vector<float> b = module_bias(*m);
        out.w13_bias.insert(out.w13_bias.end(), b.begin(), b.end());
      }
      const std::vector<float> b = module_bias(*x.down);
      out.w2_bias.insert(out.w2_bias.end(), b.begin(), b.end());
    }
  }
  if (input_scales == ExpertInputScales::shared) {
    share_widest(fc1_input);
    share_widest(fc2_input);
  }
  for (const GlobalScale& s : fc1_input) {
    out.w13_input_global_scale.push_back(s.quant);
    out.w13_input_scale.push_back(s.dequant);
  }
  for (const GlobalScale& s : fc2_input) {
    out.w2_input_global_scale.push_back(s.quant);
    out.w2_input_scale.push_back(s.dequant);
  }
  return out;
}

}  // namespace fp4cl::detail
