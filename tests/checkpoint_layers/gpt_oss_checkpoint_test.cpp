// gpt-oss's own MXFP4 checkpoint layout (transformers' Mxfp4Config: quant_method "mxfp4", each
// MoE layer's experts as fused tensors with gate and up rows interleaved; host/checkpoint/
// fused_experts.hpp): written here from experts built in the test, by the definition (row 2j of
// gate_up is gate row j, row 2j + 1 up row j; the low nibble the even element; E8M0 scales), then
// loaded (the same experts, field by field), inspected, run through MoeLayer::from_checkpoint
// against the scalar reference of the test's experts (config.json's clamped SwiGLU and top k), and
// its bad tensors refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/moe_reference.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"
#include "support/weights_equal.hpp"

namespace fp4cl::test {
namespace {

constexpr std::int64_t kExperts = 4, kHidden = 64, kInter = 64, kTopK = 2, kTokens = 5;
const char* const kLayer = "model.layers.0.mlp.experts";

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

// MXFP4 experts with every code byte possible and scales 2^-6 .. 2^3, biases on the grid k/8.
Fp4Experts test_experts() {
  Fp4Experts ex;
  ex.format = WeightFormat::mxfp4;
  ex.num_experts = kExperts;
  ex.hidden = kHidden;
  ex.intermediate = kInter;
  std::uint32_t state = 12345;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  ex.w13_packed.resize(sz(kExperts * 2 * kInter * kHidden / 2));
  ex.w2_packed.resize(sz(kExperts * kHidden * kInter / 2));
  for (auto& b : ex.w13_packed) b = static_cast<std::uint8_t>(next() >> 24);
  for (auto& b : ex.w2_packed) b = static_cast<std::uint8_t>(next() >> 24);
  ex.w13_scales.resize(sz(kExperts * 2 * kInter * kHidden / 32));
  ex.w2_scales.resize(sz(kExperts * kHidden * kInter / 32));
  for (auto& s : ex.w13_scales) s = static_cast<std::uint8_t>(121 + (next() >> 24) % 10);
  for (auto& s : ex.w2_scales) s = static_cast<std::uint8_t>(121 + (next() >> 24) % 10);
  ex.w13_global_scale.assign(sz(2 * kExperts), 1.0f);
  ex.w2_global_scale.assign(sz(kExperts), 1.0f);
  for (auto* v : {&ex.w13_input_global_scale, &ex.w2_input_global_scale, &ex.w13_input_scale, &ex.w2_input_scale})
    v->assign(sz(kExperts), 1.0f);
  ex.w13_bias.resize(sz(kExperts * 2 * kInter));
  ex.w2_bias.resize(sz(kExperts * kHidden));
  for (auto& b : ex.w13_bias) b = static_cast<float>(static_cast<int>((next() >> 24) % 33) - 16) / 8.0f;
  for (auto& b : ex.w2_bias) b = static_cast<float>(static_cast<int>((next() >> 24) % 33) - 16) / 8.0f;
  return ex;
}

struct Tensor {
  std::string name;
  Dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// Fp4Experts' w13 rows (gate rows, then up rows, `row_bytes` each per expert) interleaved as
// gpt-oss stores them: row 2j gate row j, row 2j + 1 up row j.
template <typename T>
std::vector<T> interleave(const std::vector<T>& w13, std::int64_t row_items) {
  std::vector<T> out(w13.size());
  for (std::int64_t e = 0; e < kExperts; ++e)
    for (std::int64_t j = 0; j < kInter; ++j)
      for (std::int64_t half = 0; half < 2; ++half)
        std::memcpy(&out[sz((e * 2 * kInter + 2 * j + half) * row_items)],
                    &w13[sz((e * 2 * kInter + half * kInter + j) * row_items)], sz(row_items) * sizeof(T));
  return out;
}

std::vector<std::uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto bits = static_cast<std::uint16_t>(float_to_bf16(v[i]));
    std::memcpy(&out[2 * i], &bits, 2);
  }
  return out;
}

// The layer's tensors as gpt-oss writes them, plus an unquantized BF16 attention weight.
std::vector<Tensor> gpt_oss_tensors(const Fp4Experts& ex) {
  const std::string p = std::string(kLayer) + ".";
  std::vector<Tensor> t;
  t.push_back({p + "gate_up_proj_blocks", Dtype::u8, {kExperts, 2 * kInter, kHidden / 32, 16},
               interleave(ex.w13_packed, kHidden / 2)});
  t.push_back({p + "gate_up_proj_scales", Dtype::u8, {kExperts, 2 * kInter, kHidden / 32},
               interleave(ex.w13_scales, kHidden / 32)});
  t.push_back({p + "gate_up_proj_bias", Dtype::bf16, {kExperts, 2 * kInter}, bf16_bytes(interleave(ex.w13_bias, 1))});
  t.push_back({p + "down_proj_blocks", Dtype::u8, {kExperts, kHidden, kInter / 32, 16}, ex.w2_packed});
  t.push_back({p + "down_proj_scales", Dtype::u8, {kExperts, kHidden, kInter / 32}, ex.w2_scales});
  t.push_back({p + "down_proj_bias", Dtype::bf16, {kExperts, kHidden}, bf16_bytes(ex.w2_bias)});
  t.push_back({"model.layers.0.self_attn.q_proj.weight", Dtype::bf16, {kHidden, kHidden},
               std::vector<std::uint8_t>(sz(kHidden * kHidden * 2), 0)});
  t.push_back({"model.layers.0.mlp.router.weight", Dtype::bf16, {kExperts, kHidden},
               std::vector<std::uint8_t>(sz(kExperts * kHidden * 2), 0)});
  return t;
}

const char* const kConfig = R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 64,
  "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2,
  "swiglu_limit": 7.0,
  "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
})";

void write_checkpoint(const std::filesystem::path& dir, const std::vector<Tensor>& tensors,
                      const std::string& config = kConfig) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config;
  SafetensorsWriter writer;
  for (const Tensor& t : tensors) writer.add(t.name, t.dtype, t.shape, t.bytes);
  writer.write((dir / "model.safetensors").string());
}

TEST(GptOssCheckpoint, FusedExpertsLoadAsTheExpertsTheyWereWrittenFrom) {
  TempDir dir("fp4cl-gpt-oss");
  const Fp4Experts ex = test_experts();
  write_checkpoint(dir.path(), gpt_oss_tensors(ex));
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.config().producer(), QuantProducer::gpt_oss);
  ASSERT_EQ(ckpt.layers().size(), 1u);  // the BF16 attention and router weights are not layers
  const CheckpointLayer& layer = ckpt.layers().front();
  EXPECT_EQ(layer.name, kLayer);
  EXPECT_EQ(layer.kind, LayerKind::moe);
  EXPECT_EQ(layer.scheme, (QuantScheme{WeightFormat::mxfp4, Activations::bf16}));
  EXPECT_EQ(layer.num_experts, kExperts);
  EXPECT_EQ(layer.hidden, kHidden);
  EXPECT_EQ(layer.intermediate, kInter);
  EXPECT_EQ(ckpt.moe_layer("model.layers.0").name, kLayer);

  expect_experts_equal(ckpt.load_moe("model.layers.0").experts, ex);

  const CheckpointReport report = inspect_checkpoint(ckpt);
  EXPECT_EQ(report.producer, "gpt-oss MXFP4");
  ASSERT_EQ(report.layers.size(), 1u);
  EXPECT_TRUE(report.layers.front().biases);
  EXPECT_EQ(report.layers.front().layer.expert_naming, "gpt-oss (fused experts)");
}

// From the checkpoint to a layer: config.json's top 2 and clamped SwiGLU (model_type gpt_oss),
// against the scalar reference of the experts the test wrote (not the loaded ones).
TEST(GptOssCheckpoint, MoeLayerFromTheCheckpointMatchesTheReference) {
  TempDir dir("fp4cl-gpt-oss");
  const Fp4Experts ex = test_experts();
  write_checkpoint(dir.path(), gpt_oss_tensors(ex));
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  EXPECT_EQ(config.top_k, kTopK);
  EXPECT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
  MoeLayer moe = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, kHidden, 7);
  const std::vector<float> logits = gaussian_logits(kTokens, kExperts, 8);
  const MoeRun run = run_moe_logits(moe, config, x, logits, kTokens);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  ro.activation = config.activation;
  const auto routing = reference::routing_from_logits(logits, kTokens, kExperts, config.top_k, config.renormalize);
  EXPECT_EQ(moe_outside_bound(reference::moe_reference(ex, ro, x, routing), run, config.output, "gpt-oss"), 0u);
}

// What the fused tensors must be, each refused by name with what was expected.
TEST(GptOssCheckpoint, BadFusedTensorsAreRefusedByName) {
  const Fp4Experts ex = test_experts();
  const std::string p = std::string(kLayer) + ".";
  struct Case {
    const char* what;
    std::function<void(std::vector<Tensor>&)> change;
    std::vector<std::string> expected;
    bool at_load = false;  // found by load_moe (the values), not by open
  };
  const Case cases[] = {
      {"scales of the wrong shape",
       [&](std::vector<Tensor>& t) {
         t[1].shape = {kExperts, 2 * kInter, kHidden / 16};
         t[1].bytes.assign(sz(kExperts * 2 * kInter * kHidden / 16), 127);
       },
       {p + "gate_up_proj_scales", "has shape [4, 128, 4]; expected [4, 128, 2]"}},
      {"blocks not of 16 bytes",
       [&](std::vector<Tensor>& t) { t[0].shape = {kExperts, 2 * kInter, kHidden / 16, 8}; },
       {p + "gate_up_proj_blocks", "expected U8 [E, 2I, H/32, 16]"}},
      {"down blocks missing", [&](std::vector<Tensor>& t) { t.erase(t.begin() + 3); },
       {"no tensor '" + p + "down_proj_blocks'"}},
      {"one bias only", [&](std::vector<Tensor>& t) { t.erase(t.begin() + 5); },
       {p + "gate_up_proj_bias", "no '" + p + "down_proj_bias'"}},
      {"a NaN scale", [&](std::vector<Tensor>& t) { t[4].bytes[sz(3 * kHidden * 2 + 5 * 2 + 1)] = 0xFF; },
       {p + "down_proj_scales", "block scale [3, 5, 1] is 0xFF, NaN (E8M0 0xFF)"}, true},
      {"a NaN bias",
       [&](std::vector<Tensor>& t) {
         const auto nan = static_cast<std::uint16_t>(0x7FC0);
         std::memcpy(&t[2].bytes[6], &nan, 2);
       },
       {p + "gate_up_proj_bias", "a bias must be finite"}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir("fp4cl-gpt-oss-bad");
    std::vector<Tensor> tensors = gpt_oss_tensors(ex);
    c.change(tensors);
    write_checkpoint(dir.path(), tensors);
    try {
      const Checkpoint ckpt = Checkpoint::open(dir.path());
      if (c.at_load) ckpt.load_moe(kLayer);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      for (const std::string& s : c.expected) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
    }
  }
  // config.json's expert count against the tensors'.
  {
    TempDir dir("fp4cl-gpt-oss-count");
    std::string config = kConfig;
    config.replace(config.find("\"num_local_experts\": 4"), 22, "\"num_local_experts\": 8");
    write_checkpoint(dir.path(), gpt_oss_tensors(ex), config);
    try {
      Checkpoint::open(dir.path());
      ADD_FAILURE() << "8 experts in config.json, 4 in the tensors: accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("num_local_experts says 8 experts, but tensor '" + p + "gate_up_proj_blocks'"),
                std::string::npos)
          << e.what();
    }
  }
  // A config that leaves the experts unconverted: listed as unsupported, never loaded.
  {
    TempDir dir("fp4cl-gpt-oss-unconverted");
    std::string config = kConfig;
    config.replace(config.find("\"lm_head\""), 9, "\"lm_head\", \"model.layers.*.mlp.experts\"");
    write_checkpoint(dir.path(), gpt_oss_tensors(ex), config);
    const Checkpoint ckpt = Checkpoint::open(dir.path());
    EXPECT_TRUE(ckpt.layers().empty());
    ASSERT_EQ(ckpt.unsupported_modules().size(), 1u);
    EXPECT_EQ(ckpt.unsupported_modules().front().module, kLayer);
    EXPECT_NE(ckpt.unsupported_modules().front().reason.find("modules_to_not_convert entry 'model.layers.*.mlp.experts'"),
              std::string::npos)
        << ckpt.unsupported_modules().front().reason;
  }
}

}  // namespace
}  // namespace fp4cl::test
