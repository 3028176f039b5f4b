// Layers created from checkpoints in one call (Linear::from_checkpoint, MoeLayer::from_checkpoint)
// for every layout and scheme the quantizer writes, against the scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "reference/moe_reference.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr std::int64_t kTokens = 5;

class LayersFromCheckpoint : public testing::TestWithParam<Variant> {};

TEST_P(LayersFromCheckpoint, MoeFromRouterLogitsMatchesTheReference) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model(GetParam()));
  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  EXPECT_EQ(config.scheme, GetParam().scheme);
  EXPECT_EQ(config.top_k, 2);       // config.json num_experts_per_tok
  EXPECT_TRUE(config.renormalize);  // config.json norm_topk_prob
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0");
  EXPECT_EQ(layer.scheme(), GetParam().scheme);
  EXPECT_EQ(layer.num_local_experts(), 4);

  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 1);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 2);
  const MoeRun run = run_moe_logits(layer, config, x, logits, kTokens);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0.mlp.experts").experts, ro, x,
                                            reference::routing_from_logits(logits, kTokens, 4, 2, true));
  EXPECT_EQ(moe_outside_bound(ref, run, config.output, variant_name(GetParam())), 0u);
  EXPECT_GT(std::count_if(run.values.begin(), run.values.end(), [](float v) { return v != 0.0f; }), 200);
}

TEST_P(LayersFromCheckpoint, AttentionProjectionsMatchTheReference) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model(GetParam()));
  for (const std::string module : {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"}) {
    const LoadedLinear loaded = ckpt.load_linear(module);
    for (const std::int64_t m : {kTokens, std::int64_t{40}}) {  // the decode and the prefill kernel
      LinearOptions o;
      o.max_tokens = m;
      o.output = m == kTokens ? OutputType::bf16 : OutputType::fp32;
      Linear layer = Linear::from_checkpoint(shared_context(), ckpt, module, o);
      EXPECT_EQ(layer.scheme(), GetParam().scheme);
      EXPECT_EQ(layer.n(), 64);
      EXPECT_EQ(layer.k(), 64);
      const std::vector<std::uint16_t> x = gaussian_bf16(m, 64, 3);
      const std::vector<float> y = run_linear(layer, x, m);
      EXPECT_EQ(linear_outside_bound(loaded.scheme, loaded.weight, x, m, y, o.output == OutputType::bf16,
                                     module + " " + layer.kernel_name(m)),
                0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutAndScheme, LayersFromCheckpoint, testing::ValuesIn(every_layout_and_scheme()),
                         [](const testing::TestParamInfo<Variant>& p) { return variant_name(p.param); });

}  // namespace
}  // namespace fp4cl::test
