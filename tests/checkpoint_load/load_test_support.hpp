// Helpers for the checkpoint-loading tests: error-message checks (support/errors.hpp), bit-exact comparisons of loaded
// weights with what a fixture quantized, and the stacked experts a fixture implies.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/weights.hpp"
#include "support/errors.hpp"
#include "support/weights_equal.hpp"

namespace fp4cl {
inline void PrintTo(const QuantScheme& scheme, std::ostream* os) { *os << scheme.name(); }
}  // namespace fp4cl

namespace fp4cl::test {

// The quant-direction activation scale a load must give for `e` under `layout`: the stored gs_q
// (compressed-tensors), or the reciprocal of the stored gs_d (ModelOpt).
inline float loaded_input_gs_quant(Layout layout, const ExpectedModule& e) {
  return layout == Layout::modelopt ? 1.0f / (1.0f / e.input_gs_quant) : e.input_gs_quant;
}
// The dequant-direction one: the reciprocal of gs_q either way (ModelOpt stores exactly that).
inline float loaded_input_scale(const ExpectedModule& e) { return 1.0f / e.input_gs_quant; }

// A loaded linear weight against what the fixture quantized for it: every byte and scale equal.
inline void expect_weight_matches(const Fp4Weight& w, const FixtureCheckpoint& f, const std::string& module) {
  const ExpectedModule& e = f.expected(module);
  const QuantScheme scheme = f.spec().scheme;
  SCOPED_TRACE(module);
  EXPECT_EQ(w.format, scheme.weight);
  EXPECT_EQ(w.n, e.weight.rows);
  EXPECT_EQ(w.k, e.weight.cols);
  EXPECT_EQ(w.packed, e.weight.packed);
  EXPECT_EQ(w.scales, e.weight.scales);
  EXPECT_EQ(bits(w.global_scale), bits(e.weight.global_scale));
  if (scheme.weight == WeightFormat::nvfp4 && !scheme.w4a16()) {
    EXPECT_EQ(bits(w.input_global_scale), bits(loaded_input_gs_quant(f.spec().layout, e)));
    EXPECT_EQ(bits(w.input_scale), bits(loaded_input_scale(e)));
  } else {
    EXPECT_EQ(w.input_global_scale, 1.0f);
    EXPECT_EQ(w.input_scale, 1.0f);
  }
  // And so it dequantizes to exactly what was quantized.
  QuantizedRows q;
  q.format = w.format;
  q.rows = w.n;
  q.cols = w.k;
  q.packed = w.packed;
  q.scales = w.scales;
  q.global_scale = w.global_scale;
  EXPECT_EQ(bits(dequantize(q)), bits(dequantize(e.weight)));
}

// The Fp4Experts the fixture's MoE layer `m` must load to, with per-expert activation scales.
inline Fp4Experts expected_experts(const FixtureCheckpoint& f, const MoeSpec& m) {
  const ModelSpec& s = f.spec();
  Fp4Experts x;
  x.format = s.scheme.weight;
  x.num_experts = m.experts;
  x.hidden = m.hidden;
  x.intermediate = m.intermediate;
  const bool w4a4_nvfp4 = s.scheme.weight == WeightFormat::nvfp4 && !s.scheme.w4a16();
  for (std::int64_t e = 0; e < m.experts; ++e) {
    const ExpectedModule& gate = f.expected(expert_module(s.expert_style, m.prefix, e, 0));
    const ExpectedModule& up = f.expected(expert_module(s.expert_style, m.prefix, e, 1));
    const ExpectedModule& down = f.expected(expert_module(s.expert_style, m.prefix, e, 2));
    for (const ExpectedModule* p : {&gate, &up}) {
      x.w13_packed.insert(x.w13_packed.end(), p->weight.packed.begin(), p->weight.packed.end());
      x.w13_scales.insert(x.w13_scales.end(), p->weight.scales.begin(), p->weight.scales.end());
      x.w13_global_scale.push_back(p->weight.global_scale);
    }
    x.w2_packed.insert(x.w2_packed.end(), down.weight.packed.begin(), down.weight.packed.end());
    x.w2_scales.insert(x.w2_scales.end(), down.weight.scales.begin(), down.weight.scales.end());
    x.w2_global_scale.push_back(down.weight.global_scale);
    // FC1's activations: the smaller gs_q of gate and up (the larger amax).
    const ExpectedModule& fc1 = gate.input_gs_quant <= up.input_gs_quant ? gate : up;
    x.w13_input_global_scale.push_back(w4a4_nvfp4 ? loaded_input_gs_quant(s.layout, fc1) : 1.0f);
    x.w13_input_scale.push_back(w4a4_nvfp4 ? loaded_input_scale(fc1) : 1.0f);
    x.w2_input_global_scale.push_back(w4a4_nvfp4 ? loaded_input_gs_quant(s.layout, down) : 1.0f);
    x.w2_input_scale.push_back(w4a4_nvfp4 ? loaded_input_scale(down) : 1.0f);
  }
  return x;
}

}  // namespace fp4cl::test
