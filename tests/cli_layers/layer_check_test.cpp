// The --check logic of `fp4cl run` and `fp4cl demo` (tools/fp4cl/layer_runs.cpp): a correct device
// output passes, and one moved beyond the reference's bound is reported as out of bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/formats.hpp"
#include "layer_runs.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr std::int64_t kTokens = 4;

// The next BF16 value away from zero, `steps` times.
std::uint16_t bf16_away(std::uint16_t bits, int steps) {
  const float v = bf16_to_float(bits);
  return static_cast<std::uint16_t>(v == 0.0f ? bits : bits + steps);
}

TEST(LayerCheck, LinearPassesAndCatchesAWrongOutput) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model({QuantProducer::modelopt, kNvfp4, {}}));
  const LoadedLinear loaded = ckpt.load_linear("model.layers.0.self_attn.o_proj");
  LinearOptions o;
  o.max_tokens = kTokens;
  Linear layer = Linear::create(shared_context(), loaded.weight, loaded.scheme, o);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 41);
  cli::LayerOutput y = cli::run_linear(layer, x, kTokens);
  cli::CheckResult r = cli::check_linear(loaded.scheme, loaded.weight, x, kTokens, y);
  EXPECT_TRUE(r.ok()) << cli::describe(r);
  EXPECT_EQ(r.checked, static_cast<std::size_t>(kTokens * 64));
  EXPECT_LE(r.worst_ratio, 1.0);

  y.bf16_bits[70] = bf16_away(y.bf16_bits[70], 3);  // three BF16 ulps off
  r = cli::check_linear(loaded.scheme, loaded.weight, x, kTokens, y);
  EXPECT_EQ(r.outside, 1u);
  EXPECT_GT(r.worst_ratio, 1.0);
  EXPECT_NE(cli::describe(r).find("1 of 256 outputs OUT OF BOUNDS"), std::string::npos) << cli::describe(r);
  EXPECT_NE(cli::describe(r).find("y[1, 6]"), std::string::npos) << cli::describe(r);
}

TEST(LayerCheck, MoePassesAndCatchesAWrongOutput) {
  const Checkpoint ckpt = Checkpoint::open(quantized_model({QuantProducer::modelopt, kNvfp4, {}}));
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  config.max_tokens = kTokens;
  config.output = MoeOutput::fp32;
  const LoadedExperts loaded = ckpt.load_moe("model.layers.0");
  MoeLayer layer = MoeLayer::create(shared_context(), loaded.experts, config);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 42);
  cli::MoeRoutingInput routing;
  routing.router_logits = gaussian_logits(kTokens, 4, 43);
  cli::MoeRun run = cli::run_moe(shared_context(), layer, config.output, x, routing, kTokens);
  cli::CheckResult r = cli::check_moe(loaded.experts, config, x, routing, kTokens, run.output);
  EXPECT_TRUE(r.ok()) << cli::describe(r);

  run.output.f32[5] = run.output.f32[5] * 1.01f + 1e-3f;
  r = cli::check_moe(loaded.experts, config, x, routing, kTokens, run.output);
  EXPECT_EQ(r.outside, 1u) << cli::describe(r);
  EXPECT_NE(cli::describe(r).find("y[0, 5]"), std::string::npos) << cli::describe(r);
  // Checked with other routing than the layer ran, most outputs fall outside.
  config.top_k = 1;
  r = cli::check_moe(loaded.experts, config, x, routing, kTokens, run.output);
  EXPECT_GT(r.outside, 100u) << cli::describe(r);
}

}  // namespace
}  // namespace fp4cl::test
