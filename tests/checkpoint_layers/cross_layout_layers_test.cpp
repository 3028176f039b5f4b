// ModelOpt vs compressed-tensors checkpoints quantized from the same source, at the layer output.
//
// Codes, block scales and the weight's global scale come out identical in both layouts: the
// quantizer computes gs_q = 2688/amax, compressed-tensors stores it and ModelOpt stores fl(1/gs_q),
// which is what the loader derives from gs_q. The activation scale differs in the stored
// direction: ModelOpt stores gs_d = fl(amax/2688) and compressed-tensors gs_q = fl(2688/amax),
// and the loader keeps the stored one bit-exact and derives the other as its fp32 reciprocal. So
// ModelOpt's input_scale and compressed-tensors' input_global_scale are the stored values, and the
// derived ones may differ from the other layout's by the reciprocal's rounding (an ulp). With an
// activation scale that is a power of two both directions are exact and everything is identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};
constexpr std::int64_t kTokens = 6;
const char* const kLayer = "model.layers.0";
const char* const kProjection = "model.layers.0.self_attn.q_proj";

std::uint32_t bits(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, 4);
  return b;
}
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float f : v) out.push_back(bits(f));
  return out;
}

// |a - b| in ulps of positive floats.
std::int64_t ulps(float a, float b) {
  return std::abs(static_cast<std::int64_t>(bits(a)) - static_cast<std::int64_t>(bits(b)));
}

struct Outputs {
  std::vector<std::uint32_t> moe, linear_decode, linear_prefill;
};

// The MoE layer (fp32 output, router logits) and q_proj (fp32 output, decode and prefill sizes).
Outputs run_layers(const Checkpoint& ckpt) {
  Outputs o;
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, kLayer);
  config.output = MoeOutput::fp32;
  MoeLayer moe = MoeLayer::from_checkpoint(shared_context(), ckpt, kLayer, config);
  o.moe = run_moe_logits(moe, config, gaussian_bf16(kTokens, 64, 7), gaussian_logits(kTokens, 4, 8), kTokens).bits;
  for (const std::int64_t m : {kTokens, std::int64_t{40}}) {
    LinearOptions lo;
    lo.output = OutputType::fp32;
    lo.max_tokens = m;
    Linear linear = Linear::from_checkpoint(shared_context(), ckpt, kProjection, lo);
    (m == kTokens ? o.linear_decode : o.linear_prefill) = bits(run_linear(linear, gaussian_bf16(m, 64, 9), m));
  }
  return o;
}

void expect_same_codes_and_weight_scales(const Checkpoint& mo, const Checkpoint& ct) {
  for (const std::string& module : mo.quantized_modules()) {
    const Fp4Weight a = mo.load_linear(module).weight, b = ct.load_linear(module).weight;
    EXPECT_EQ(a.packed, b.packed) << module;
    EXPECT_EQ(a.scales, b.scales) << module;
    EXPECT_EQ(bits(a.global_scale), bits(b.global_scale)) << module;
  }
}

TEST(CrossLayoutLayers, W4A16PreparesIdenticalWeightsAndGivesBitIdenticalOutputs) {
  const Checkpoint mo = Checkpoint::open(quantized_model({QuantProducer::modelopt, kNvfp4A16, {}}));
  const Checkpoint ct = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4A16, {}}));
  expect_same_codes_and_weight_scales(mo, ct);
  const Outputs a = run_layers(mo), b = run_layers(ct);
  EXPECT_EQ(a.moe, b.moe);
  EXPECT_EQ(a.linear_decode, b.linear_decode);
  EXPECT_EQ(a.linear_prefill, b.linear_prefill);
}

TEST(CrossLayoutLayers, W4A4WithAPowerOfTwoActivationScaleIsBitIdentical) {
  const float amax = 2688.0f / 1024.0f;  // gs_d = 2^-10, gs_q = 2^10: exact in both directions
  const Checkpoint mo = Checkpoint::open(quantized_model({QuantProducer::modelopt, kNvfp4, amax}));
  const Checkpoint ct = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, amax}));
  expect_same_codes_and_weight_scales(mo, ct);
  for (const std::string& module : mo.quantized_modules()) {
    const Fp4Weight a = mo.load_linear(module).weight, b = ct.load_linear(module).weight;
    EXPECT_EQ(a.input_scale, 0x1p-10f) << module;
    EXPECT_EQ(b.input_scale, 0x1p-10f) << module;
    EXPECT_EQ(a.input_global_scale, 1024.0f) << module;
    EXPECT_EQ(b.input_global_scale, 1024.0f) << module;
  }
  const Outputs a = run_layers(mo), b = run_layers(ct);
  EXPECT_EQ(a.moe, b.moe);
  EXPECT_EQ(a.linear_decode, b.linear_decode);
  EXPECT_EQ(a.linear_prefill, b.linear_prefill);
}

TEST(CrossLayoutLayers, W4A4CalibratedScalesKeepEachLayoutsStoredDirection) {
  const Checkpoint mo = Checkpoint::open(quantized_model({QuantProducer::modelopt, kNvfp4, {}}));
  const Checkpoint ct = Checkpoint::open(quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}}));
  expect_same_codes_and_weight_scales(mo, ct);
  int exact_pairs = 0, modules = 0;
  for (const std::string& module : mo.quantized_modules()) {
    const Fp4Weight a = mo.load_linear(module).weight, b = ct.load_linear(module).weight;
    const float stored_d = mo.tensors().tensor(module + ".input_scale").scalar_f32();
    const float stored_q = ct.tensors().tensor(module + ".input_global_scale").scalar_f32();
    // The stored direction is used as stored: alpha comes from ModelOpt's input_scale itself.
    EXPECT_EQ(bits(a.input_scale), bits(stored_d)) << module;
    EXPECT_EQ(bits(b.input_global_scale), bits(stored_q)) << module;
    // The derived direction is the fp32 reciprocal: within an ulp of the other layout's stored value.
    EXPECT_EQ(bits(a.input_global_scale), bits(1.0f / stored_d)) << module;
    EXPECT_EQ(bits(b.input_scale), bits(1.0f / stored_q)) << module;
    EXPECT_LE(ulps(a.input_global_scale, stored_q), 1) << module;
    EXPECT_LE(ulps(b.input_scale, stored_d), 1) << module;
    exact_pairs +=
        bits(a.input_scale) == bits(b.input_scale) && bits(a.input_global_scale) == bits(b.input_global_scale);
    ++modules;
  }
  RecordProperty("modules_with_identical_activation_scales", exact_pairs);
  RecordProperty("quantized_modules", modules);
  EXPECT_GT(exact_pairs, 0);

  // The attention projections as layers: bit-identical where the prepared scales are identical,
  // else each within its own reference's bound.
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 9);
  for (const std::string& module : mo.quantized_modules()) {
    if (module.find("self_attn") == std::string::npos) continue;
    LinearOptions lo;
    lo.output = OutputType::fp32;
    lo.max_tokens = kTokens;
    Linear la = Linear::from_checkpoint(shared_context(), mo, module, lo);
    Linear lb = Linear::from_checkpoint(shared_context(), ct, module, lo);
    const std::vector<float> ya = run_linear(la, x, kTokens), yb = run_linear(lb, x, kTokens);
    const Fp4Weight a = mo.load_linear(module).weight, b = ct.load_linear(module).weight;
    if (bits(a.input_scale) == bits(b.input_scale) && bits(a.input_global_scale) == bits(b.input_global_scale)) {
      EXPECT_EQ(bits(ya), bits(yb)) << module;
    } else {
      EXPECT_EQ(linear_outside_bound(kNvfp4, a, x, kTokens, ya, false, "ModelOpt " + module), 0u);
      EXPECT_EQ(linear_outside_bound(kNvfp4, b, x, kTokens, yb, false, "compressed-tensors " + module), 0u);
    }
  }
}

}  // namespace
}  // namespace fp4cl::test
