// The same model written by ModelOpt and by compressed-tensors (NVFP4) loads to the same prepared
// weights. The producers store global scales in opposite directions (FP4.md §3), so exactness
// depends on the values:
//  - gs_q a power of two: 1/gs_q is exact, both layouts give identical bytes and scales.
//  - gs_q calibrated (448·6/amax, generally not a power of two): ModelOpt stores gs_d = fl(1/gs_q).
//    The weight's global scale (dequant) and the activations' input_scale (dequant) are then
//    identical in both layouts — so is the epilogue's alpha = input_scale × global_scale — while
//    the quant-direction input_global_scale is gs_q for compressed-tensors and fl(1/fl(1/gs_q))
//    for ModelOpt, which may differ from gs_q by an ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};

struct Pair {
  Checkpoint modelopt, compressed_tensors;
};

// One model (same seed, same values, same gs_q) written in both layouts.
class CrossLayout : public testing::Test {
 protected:
  Pair open_both(ScaleChoice scales, ExpertStyle style = ExpertStyle::qwen3) {
    ModelSpec spec = moe_model(Layout::modelopt, kNvfp4, 2, 4, 64, 32, style);
    spec.scales = scales;
    modelopt_ = FixtureCheckpoint::build(spec);
    spec.layout = Layout::compressed_tensors;
    ct_ = FixtureCheckpoint::build(spec);
    modelopt_.write(mo_dir_.path());
    ct_.write(ct_dir_.path());
    return Pair{Checkpoint::open(mo_dir_.path()), Checkpoint::open(ct_dir_.path())};
  }

  FixtureCheckpoint modelopt_, ct_;
  TempDir mo_dir_, ct_dir_;
};

TEST_F(CrossLayout, PowerOfTwoScalesLoadIdentically) {
  const Pair p = open_both(ScaleChoice::power_of_two);
  ASSERT_EQ(p.modelopt.layers().size(), p.compressed_tensors.layers().size());
  for (const CheckpointLayer& layer : p.modelopt.layers()) {
    SCOPED_TRACE(layer.name);
    if (layer.kind == LayerKind::linear) {
      expect_weights_equal(p.modelopt.load_linear(layer.name).weight,
                           p.compressed_tensors.load_linear(layer.name).weight);
    } else {
      for (ExpertInputScales mode : {ExpertInputScales::per_expert, ExpertInputScales::shared}) {
        expect_experts_equal(p.modelopt.load_moe(layer.name, {mode}).experts,
                             p.compressed_tensors.load_moe(layer.name, {mode}).experts);
      }
    }
  }
  // The scales really are powers of two, stored in opposite directions.
  const std::string q = "model.layers.0.self_attn.q_proj";
  int exponent = 0;
  EXPECT_EQ(std::frexp(ct_.expected(q).weight_gs_quant, &exponent), 0.5f);
  EXPECT_NE(ct_.tensors.at(ct_.global_scale_name(q)).bytes, modelopt_.tensors.at(modelopt_.global_scale_name(q)).bytes);
}

TEST_F(CrossLayout, CalibratedScalesAgreeInTheDequantDirection) {
  const Pair p = open_both(ScaleChoice::calibrated);
  int quant_direction_differs = 0;
  for (const LinearSpec& l : modelopt_.spec().linears) {
    SCOPED_TRACE(l.module);
    const Fp4Weight mo = p.modelopt.load_linear(l.module).weight;
    const Fp4Weight ct = p.compressed_tensors.load_linear(l.module).weight;
    const float gs_q = ct_.expected(l.module).input_gs_quant;
    EXPECT_EQ(mo.packed, ct.packed);
    EXPECT_EQ(mo.scales, ct.scales);
    EXPECT_EQ(bits(mo.global_scale), bits(ct.global_scale));
    EXPECT_EQ(bits(mo.input_scale), bits(ct.input_scale));
    EXPECT_EQ(bits(mo.input_scale * mo.global_scale), bits(ct.input_scale * ct.global_scale));  // alpha
    // compressed-tensors: the stored gs_q itself; ModelOpt: the stored gs_d itself.
    EXPECT_EQ(bits(ct.input_global_scale), bits(gs_q));
    EXPECT_EQ(bits(mo.input_scale), bits(1.0f / gs_q));
    // ModelOpt's quant direction is the reciprocal of its stored gs_d: within an ulp of gs_q.
    EXPECT_EQ(bits(mo.input_global_scale), bits(1.0f / mo.input_scale));
    EXPECT_LE(std::abs(static_cast<std::int64_t>(bits(mo.input_global_scale)) - static_cast<std::int64_t>(bits(gs_q))),
              1);
    quant_direction_differs += bits(mo.input_global_scale) != bits(gs_q);
  }
  // Not every scale is a power of two here: the dequant directions agreed above for a reason.
  int non_power_of_two = 0;
  for (const auto& [module, e] : ct_.modules) {
    int exponent = 0;
    non_power_of_two += std::frexp(e.weight_gs_quant, &exponent) != 0.5f;
  }
  EXPECT_GT(non_power_of_two, 0);
  RecordProperty("modelopt_quant_direction_ulp_differences", quant_direction_differs);
}

// A value whose double inversion in fp32 is off by an ulp: what ModelOpt's direction costs.
TEST(CrossLayoutUlp, DoubleInversionCanMissByOneUlp) {
  float x = 1.0f;
  while (1.0f / (1.0f / x) == x) x = std::nextafter(x, 2.0f);
  EXPECT_LT(x, 2.0f);
  const float round_trip = 1.0f / (1.0f / x);
  EXPECT_EQ(std::abs(static_cast<std::int64_t>(bits(round_trip)) - static_cast<std::int64_t>(bits(x))), 1);

  // A linear whose activations' gs_q is such a value: ModelOpt keeps gs_d = 1/x exactly.
  ModelSpec spec = dense_model(Layout::modelopt, kNvfp4, 1);
  spec.linears.resize(1);
  FixtureCheckpoint mo = FixtureCheckpoint::build(spec);
  spec.layout = Layout::compressed_tensors;
  FixtureCheckpoint ct = FixtureCheckpoint::build(spec);
  const std::string m = spec.linears[0].module;
  mo.set_f32(mo.input_scale_name(m), 1.0f / x);
  ct.set_f32(ct.input_scale_name(m), x);
  TempDir a, b;
  mo.write(a.path());
  ct.write(b.path());
  const Fp4Weight wm = Checkpoint::open(a.path()).load_linear(m).weight;
  const Fp4Weight wc = Checkpoint::open(b.path()).load_linear(m).weight;
  EXPECT_EQ(bits(wm.input_scale), bits(1.0f / x));
  EXPECT_EQ(bits(wc.input_scale), bits(1.0f / x));
  EXPECT_EQ(bits(wc.input_global_scale), bits(x));
  EXPECT_EQ(bits(wm.input_global_scale), bits(round_trip));
  EXPECT_NE(bits(wm.input_global_scale), bits(wc.input_global_scale));
}

}  // namespace
}  // namespace fp4cl::test
