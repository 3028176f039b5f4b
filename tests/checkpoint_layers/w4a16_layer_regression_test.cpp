// Regression at the layer output: a W4A16 checkpoint that also carries calibrated activation
// scales (ModelOpt input_scale, compressed-tensors input_global_scale, as mixed exports do) runs
// bit for bit like the same checkpoint without them. Running W4A4 math on a W4A16 checkpoint
// would quantize the activations and change every output.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};
constexpr std::int64_t kTokens = 6;

std::vector<std::uint32_t> fp32_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

class W4A16LayerOutputs : public testing::TestWithParam<QuantProducer> {};

TEST_P(W4A16LayerOutputs, IgnoreCarriedActivationScales) {
  const QuantProducer layout = GetParam();
  const std::filesystem::path clean_dir = quantized_model({layout, kNvfp4A16, {}});
  const Checkpoint clean = Checkpoint::open(clean_dir);
  // Activation scales of a calibrated amax of 3 in the layout's own names and direction.
  const bool modelopt = layout == QuantProducer::modelopt;
  std::map<std::string, float> extra;
  for (const std::string& module : clean.quantized_modules())
    extra[module + (modelopt ? ".input_scale" : ".input_global_scale")] = modelopt ? 3.0f / 2688.0f : 2688.0f / 3.0f;
  TempDir dir("fp4cl-w4a16-carrying");
  copy_with_extra_tensors(clean_dir, dir.path() / "model", extra, modelopt);
  const Checkpoint carrying = Checkpoint::open(dir.path() / "model");
  ASSERT_EQ(carrying.tensors().size(), clean.tensors().size() + extra.size());

  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 21);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 22);
  std::vector<std::vector<std::uint32_t>> moe, linear;
  for (const Checkpoint* ckpt : {&clean, &carrying}) {
    MoeConfig config = MoeConfig::from_checkpoint(*ckpt, "model.layers.0");
    EXPECT_EQ(config.scheme, kNvfp4A16);
    config.output = MoeOutput::fp32;
    MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), *ckpt, "model.layers.0", config);
    moe.push_back(run_moe_logits(layer, config, x, logits, kTokens).bits);
    LinearOptions o;
    o.output = OutputType::fp32;
    o.max_tokens = kTokens;
    Linear q = Linear::from_checkpoint(shared_context(), *ckpt, "model.layers.0.self_attn.q_proj", o);
    EXPECT_EQ(q.scheme(), kNvfp4A16);
    linear.push_back(fp32_bits(run_linear(q, x, kTokens)));
  }
  EXPECT_EQ(moe[0], moe[1]);
  EXPECT_EQ(linear[0], linear[1]);

  // The check is sensitive: W4A4 math with the carried scale changes the outputs.
  Fp4Weight w = clean.load_linear("model.layers.0.self_attn.q_proj").weight;
  w.set_input_scales_from_quant(2688.0f / 3.0f);
  LinearOptions o;
  o.output = OutputType::fp32;
  o.max_tokens = kTokens;
  Linear w4a4 = Linear::create(shared_context(), w, {WeightFormat::nvfp4, Activations::fp4_dynamic}, o);
  EXPECT_NE(fp32_bits(run_linear(w4a4, x, kTokens)), linear[0]);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, W4A16LayerOutputs,
                         testing::Values(QuantProducer::modelopt, QuantProducer::compressed_tensors),
                         [](const testing::TestParamInfo<QuantProducer>& p) {
                           return std::string(p.param == QuantProducer::modelopt ? "ModelOpt" : "CompressedTensors");
                         });

}  // namespace
}  // namespace fp4cl::test
