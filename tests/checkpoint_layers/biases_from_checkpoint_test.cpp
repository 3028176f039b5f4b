// Biases in checkpoints ("<module>.bias" beside a quantized weight: Qwen2's q/k/v projections,
// gpt-oss's experts) are loaded and applied, never dropped: Linear and MoE layers from such a
// checkpoint against the scalar references with the biases, and the bad bias tensors refused by
// name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "reference/linear_reference.hpp"
#include "reference/moe_reference.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr std::int64_t kTokens = 5, kHidden = 64, kInter = 32, kExperts = 4;
const char* const kQProj = "model.layers.0.self_attn.q_proj";
const char* const kMoe = "model.layers.0.mlp.experts";

std::string expert_module(std::int64_t e, const char* projection) {
  return "model.layers.0.mlp.experts." + std::to_string(e) + "." + projection;
}

// n values on the grid k/8 in [-2, 2] from `seed`, as BF16 bits (exact) and as floats.
std::vector<float> grid_values(std::int64_t n, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 33) - 16) / 8.0f;
  return v;
}
std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> b;
  for (const float f : v) b.push_back(static_cast<std::uint16_t>(float_to_bf16(f)));
  return b;
}

struct ExtraTensor {
  std::string name;
  Dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};
ExtraTensor bf16_tensor(std::string name, const std::vector<float>& v) {
  const std::vector<std::uint16_t> b = to_bf16(v);
  std::vector<std::uint8_t> bytes(b.size() * 2);
  std::memcpy(bytes.data(), b.data(), bytes.size());
  return {std::move(name), Dtype::bf16, {static_cast<std::int64_t>(v.size())}, bytes};
}
ExtraTensor f32_tensor(std::string name, const std::vector<float>& v) {
  std::vector<std::uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return {std::move(name), Dtype::f32, {static_cast<std::int64_t>(v.size())}, bytes};
}

// `from` (a single-file checkpoint) copied to `to` with `extra` tensors added.
void write_with(const std::filesystem::path& from, const std::filesystem::path& to,
                const std::vector<ExtraTensor>& extra) {
  copy_checkpoint(from, to, [&](SafetensorsWriter& writer, const SafetensorsFile&) {
    for (const ExtraTensor& t : extra) writer.add(t.name, t.dtype, t.shape, t.bytes);
  });
}

// Every expert projection's bias (BF16) and q_proj's (F32).
std::vector<ExtraTensor> all_biases() {
  std::vector<ExtraTensor> extra{f32_tensor(std::string(kQProj) + ".bias", grid_values(kHidden, 1))};
  for (std::int64_t e = 0; e < kExperts; ++e) {
    const auto s = static_cast<std::uint32_t>(10 * e);
    extra.push_back(bf16_tensor(expert_module(e, "gate_proj") + ".bias", grid_values(kInter, s + 2)));
    extra.push_back(bf16_tensor(expert_module(e, "up_proj") + ".bias", grid_values(kInter, s + 3)));
    extra.push_back(bf16_tensor(expert_module(e, "down_proj") + ".bias", grid_values(kHidden, s + 4)));
  }
  return extra;
}

class BiasesFromCheckpoint : public testing::TestWithParam<Variant> {};

TEST_P(BiasesFromCheckpoint, LinearAndMoeApplyTheCheckpointsBiases) {
  TempDir dir("fp4cl-biases");
  write_with(quantized_model(GetParam()), dir.path(), all_biases());
  const Checkpoint ckpt = Checkpoint::open(dir.path());

  // Linear: the loaded bias is the tensor's, and the layer adds it.
  const LoadedLinear loaded = ckpt.load_linear(kQProj);
  ASSERT_EQ(loaded.bias, grid_values(kHidden, 1));
  Linear layer = Linear::from_checkpoint(shared_context(), ckpt, kQProj, LinearOptions{});
  EXPECT_EQ(layer.options().bias, loaded.bias);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, kHidden, 3);
  const std::vector<float> y = run_linear(layer, x, kTokens);
  const auto ref = reference::LinearReference(loaded.scheme, loaded.weight, x.data(), kTokens, loaded.bias).all();
  ASSERT_EQ(y.size(), ref.size());
  std::size_t outside = 0, moved = 0;
  const auto plain = reference::LinearReference(loaded.scheme, loaded.weight, x.data(), kTokens).all();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double bound = reference::output_bound(ref[i], kHidden, std::fabs(loaded.bias[i % kHidden]), true);
    if (!(std::fabs(static_cast<double>(y[i]) - ref[i].y) <= bound)) ++outside;
    if (std::fabs(plain[i].y - ref[i].y) > 2 * bound) ++moved;
  }
  EXPECT_EQ(outside, 0u);
  EXPECT_GT(moved, ref.size() / 2);  // the biases matter: a layer without them fails the check
  // A caller's bias beside the checkpoint's is refused, not silently replaced.
  LinearOptions with_bias;
  with_bias.bias.assign(kHidden, 1.0f);
  try {
    Linear::from_checkpoint(shared_context(), ckpt, kQProj, with_bias);
    ADD_FAILURE() << "a second bias was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has its own bias; LinearOptions::bias must be empty"), std::string::npos)
        << e.what();
  }

  // MoE: the experts' biases stacked as Fp4Experts' (gate rows, then up rows), and applied.
  const LoadedExperts experts = ckpt.load_moe(kMoe);
  ASSERT_EQ(experts.experts.w13_bias.size(), static_cast<std::size_t>(kExperts * 2 * kInter));
  ASSERT_EQ(experts.experts.w2_bias.size(), static_cast<std::size_t>(kExperts * kHidden));
  EXPECT_EQ(experts.experts.w13_bias[static_cast<std::size_t>(2 * kInter + kInter + 5)], grid_values(kInter, 13)[5]);
  EXPECT_EQ(experts.experts.w2_bias[static_cast<std::size_t>(3 * kHidden + 7)], grid_values(kHidden, 34)[7]);
  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  MoeLayer moe = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0");
  const std::vector<float> logits = gaussian_logits(kTokens, kExperts, 2);
  const MoeRun run = run_moe_logits(moe, config, x, logits, kTokens);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  const auto routing = reference::routing_from_logits(logits, kTokens, kExperts, config.top_k, true);
  EXPECT_EQ(moe_outside_bound(reference::moe_reference(experts.experts, ro, x, routing), run, config.output,
                              variant_name(GetParam())),
            0u);
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutAndScheme, BiasesFromCheckpoint, testing::ValuesIn(every_layout_and_scheme()),
                         [](const testing::TestParamInfo<Variant>& p) { return variant_name(p.param); });

// `fp4cl inspect`'s report says which layers have biases.
TEST(BiasesFromCheckpointReport, InspectNamesTheLayersWithBiases) {
  const Variant v{QuantProducer::compressed_tensors, {WeightFormat::nvfp4, Activations::fp4_dynamic}, std::nullopt};
  TempDir dir("fp4cl-bias-report");
  write_with(quantized_model(v), dir.path(), all_biases());
  const CheckpointReport report = inspect_checkpoint(Checkpoint::open(dir.path()));
  std::size_t seen = 0;
  for (const LayerReport& l : report.layers) {
    if (l.layer.name == kQProj || l.layer.name == kMoe) {
      EXPECT_TRUE(l.biases) << l.layer.name;
      ++seen;
    } else {
      EXPECT_FALSE(l.biases) << l.layer.name;
    }
  }
  EXPECT_EQ(seen, 2u);
  // Without the last expert's down_proj bias the MoE layer is not reported as having biases (and
  // does not load: above).
  std::vector<ExtraTensor> partial = all_biases();
  partial.pop_back();
  TempDir dir2("fp4cl-bias-report");
  write_with(quantized_model(v), dir2.path(), partial);
  for (const LayerReport& l : inspect_checkpoint(Checkpoint::open(dir2.path())).layers)
    if (l.layer.name == kMoe) {
      EXPECT_FALSE(l.biases);
    }
}

// A bias tensor of the wrong dtype or shape, a NaN in one, and experts with and without biases:
// errors that name the tensor and what was expected.
TEST(BiasesFromCheckpointErrors, BadBiasTensorsAreRefusedByName) {
  const Variant v{QuantProducer::modelopt, {WeightFormat::nvfp4, Activations::bf16}, std::nullopt};
  const auto refused = [&](const std::vector<ExtraTensor>& extra, bool moe, const std::string& expected) {
    TempDir dir("fp4cl-bad-bias");
    write_with(quantized_model(v), dir.path(), extra);
    try {
      const Checkpoint ckpt = Checkpoint::open(dir.path());
      if (moe) ckpt.load_moe(kMoe);
      else ckpt.load_linear(kQProj);
      ADD_FAILURE() << "accepted; expected an error with: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  const std::string q_bias = std::string(kQProj) + ".bias";
  {
    ExtraTensor t = f32_tensor(q_bias, grid_values(kHidden, 1));
    t.dtype = Dtype::i32;
    refused({t}, false, "tensor '" + q_bias + "' in '");
    refused({t}, false, "expected BF16 or F32 [64]: one bias per out-feature");
  }
  refused({f32_tensor(q_bias, grid_values(kHidden - 1, 1))}, false, "is F32 [63]; expected BF16 or F32 [64]");
  {
    std::vector<float> nan = grid_values(kHidden, 1);
    nan[9] = std::numeric_limits<float>::quiet_NaN();
    refused({f32_tensor(q_bias, nan)}, false, "has nan at [9]; a bias must be finite");
  }
  std::vector<ExtraTensor> partial = all_biases();
  partial.pop_back();  // expert 3's down_proj bias
  refused(partial, true, "but " + expert_module(3, "down_proj") + " (NVFP4 W4A16, ModelOpt) has none");
}

}  // namespace
}  // namespace fp4cl::test
