// `fp4cl run` end to end: inputs written with SafetensorsWriter, the built tool run on a checkpoint
// the quantizer wrote, its output read back and compared with the scalar reference and with the
// same layer run in this process (bit for bit: same device, deterministic layers); and its errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "support/cli_tool.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/linear_reference.hpp"
#include "reference/moe_reference.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4A16{WeightFormat::mxfp4, Activations::bf16};
constexpr std::int64_t kTokens = 5;
const std::string kQProj = "model.layers.0.self_attn.q_proj";

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

// Tensors for an input file.
struct Inputs {
  SafetensorsWriter writer;
  Inputs& bf16(const std::string& name, std::int64_t rows, std::int64_t cols, const std::vector<std::uint16_t>& v) {
    writer.add(name, Dtype::bf16, {rows, cols}, v.data(), v.size() * 2);
    return *this;
  }
  template <typename T>
  Inputs& add(const std::string& name, std::int64_t rows, std::int64_t cols, const std::vector<T>& v) {
    writer.add(name, {rows, cols}, v);
    return *this;
  }
  std::filesystem::path write(const TempDir& dir, const std::string& name = "in.safetensors") const {
    const std::filesystem::path p = dir.path() / name;
    writer.write(p.string());
    return p;
  }
};

std::string run_args(const std::filesystem::path& model, const std::string& layer, const std::filesystem::path& in,
                     const std::filesystem::path& out, const std::string& extra = "") {
  return "run " + quoted(model) + " --layer " + layer + " --input " + quoted(in) + " --output " + quoted(out) + " " +
         extra;
}

std::vector<std::uint32_t> as_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// A run's BF16 output bits as moe_outside_bound takes them.
MoeRun bf16_moe_run(const std::vector<std::uint16_t>& bits) {
  MoeRun run;
  for (std::uint16_t b : bits) {
    run.values.push_back(bf16_to_float(b));
    run.bits.push_back(b);
  }
  return run;
}

class RunCommand : public testing::Test {
 protected:
  TempDir scratch{"fp4cl-run-test"};
  std::filesystem::path out() const { return scratch.path() / "out.safetensors"; }
  // `fp4cl run` of `layer` on the tensors of `in` (written to the scratch folder) into out().
  ToolRun run_layer(const std::filesystem::path& model, const std::string& layer, const Inputs& in,
                    const std::string& extra = "") const {
    return run_tool(run_args(model, layer, in.write(scratch), out(), extra), scratch);
  }
  // A copy of checkpoint `source` whose config.json says swiglu_limit 0.5 (gpt-oss's clamped SwiGLU).
  std::filesystem::path limited_copy(const std::filesystem::path& source) const {
    const std::filesystem::path model = scratch.path() / "limited";
    std::filesystem::copy(source, model);
    nlohmann::json config_json = nlohmann::json::parse(std::ifstream(model / "config.json"));
    config_json["swiglu_limit"] = 0.5;
    std::ofstream(model / "config.json") << config_json.dump(2);
    return model;
  }
  // `fp4cl run --output-dtype f32 --check` of MoE layer 0 on x and router logits [kTokens, 4].
  ToolRun run_moe_logits_f32(const std::filesystem::path& model, const std::vector<std::uint16_t>& x,
                             const std::vector<float>& logits) const {
    return run_layer(model, "model.layers.0",
                     Inputs().bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits),
                     "--output-dtype f32 --check");
  }
};

// MoE layer 0's fp32 output bits through the library, configured by MoeConfig::from_checkpoint
// (`config`: that configuration with fp32 output, as `fp4cl run --output-dtype f32` runs it).
std::vector<std::uint32_t> library_moe_logits_bits(const Checkpoint& ckpt, const std::vector<std::uint16_t>& x,
                                                   const std::vector<float>& logits, MoeConfig& config) {
  config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  config.output = MoeOutput::fp32;
  config.max_tokens = kTokens;
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
  return run_moe_logits(layer, config, x, logits, kTokens).bits;
}

TEST_F(RunCommand, LinearMatchesTheReferenceAndTheLibrary) {
  const std::filesystem::path model = quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}});
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 31);
  const ToolRun r = run_layer(model, kQProj, Inputs().bf16("x", kTokens, 64, x), "--check");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("check against the scalar reference: 320 outputs within bounds"), std::string::npos) << r.out;

  const TensorView y = SafetensorsFile::open(out().string()).tensor("y");
  ASSERT_EQ(y.dtype(), Dtype::bf16);
  ASSERT_EQ(y.shape(), (std::vector<std::int64_t>{kTokens, 64}));
  const std::vector<std::uint16_t> bits = y.to_vector<std::uint16_t>(Dtype::bf16);
  std::vector<float> values;
  for (std::uint16_t b : bits) values.push_back(bf16_to_float(b));
  const Checkpoint ckpt = Checkpoint::open(model);
  const LoadedLinear loaded = ckpt.load_linear(kQProj);
  EXPECT_EQ(linear_outside_bound(loaded.scheme, loaded.weight, x, kTokens, values, true, "fp4cl run"), 0u);
  LinearOptions o;
  o.max_tokens = kTokens;
  Linear layer = Linear::from_checkpoint(shared_context(), ckpt, kQProj, o);
  std::vector<std::uint16_t> in_process;
  layer.run(x, kTokens, in_process);
  EXPECT_EQ(bits, in_process);
}

TEST_F(RunCommand, F32ActivationsAreRoundedToBf16) {
  const std::filesystem::path model = quantized_model({QuantProducer::compressed_tensors, kMxfp4A16, {}});
  std::vector<float> x32;
  std::vector<std::uint16_t> x16;
  for (std::uint16_t b : gaussian_bf16(kTokens, 64, 32)) {
    const float v = bf16_to_float(b) * (1.0f + 0x1p-12f);  // not a BF16 value
    x32.push_back(v);
    x16.push_back(float_to_bf16(v));
  }
  const ToolRun r =
      run_layer(model, kQProj, Inputs().add("x", kTokens, 64, x32), "--output-dtype f32");
  ASSERT_EQ(r.status, 0) << describe(r);
  const TensorView y = SafetensorsFile::open(out().string()).tensor("y");
  ASSERT_EQ(y.dtype(), Dtype::f32);
  LinearOptions o;
  o.max_tokens = kTokens;
  o.output = OutputType::fp32;
  Linear layer = Linear::from_checkpoint(shared_context(), Checkpoint::open(model), kQProj, o);
  std::vector<float> in_process;
  layer.run(x16, kTokens, in_process);
  EXPECT_EQ(as_bits(y.to_vector<float>()), as_bits(in_process));
}

TEST_F(RunCommand, MoeFromRouterLogitsMatchesTheReferenceAndTheLibrary) {
  const std::filesystem::path model = quantized_model({QuantProducer::modelopt, kNvfp4, {}});
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 33);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 34);
  const ToolRun r = run_moe_logits_f32(model, x, logits);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("top-2 (config.json), renormalized"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; SwiGLU; strategy "), std::string::npos) << r.out;
  // The strategy with its tiles and their source (MoeLayer::kernel_description).
  EXPECT_TRUE(std::regex_search(r.out, std::regex("; strategy (grouped|decode|split|mma): tile_m [0-9]+, local sizes "
                                                  "[0-9]+ and [0-9]+.* \\[(built-in|tuned[^\\]]*)\\]\n")))
      << r.out;
  const std::vector<float> y =
      SafetensorsFile::open(out().string()).tensor("y").expect_shape({kTokens, 64}).to_vector<float>();

  const Checkpoint ckpt = Checkpoint::open(model);
  MoeConfig config;
  EXPECT_EQ(as_bits(y), library_moe_logits_bits(ckpt, x, logits, config));
  reference::MoeReferenceOptions ro;
  ro.scheme = kNvfp4;
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0").experts, ro, x,
                                            reference::routing_from_logits(logits, kTokens, 4, 2, true));
  MoeRun run;
  run.values = y;
  run.bits = as_bits(y);
  EXPECT_EQ(moe_outside_bound(ref, run, MoeOutput::fp32, "fp4cl run"), 0u);
}

// config.json's clamped SwiGLU (a swiglu_limit) is what `fp4cl run` runs, says and checks against:
// its output is the library's for MoeConfig::from_checkpoint, and its check passes.
TEST_F(RunCommand, MoeRunsAndNamesConfigJsonsActivation) {
  const std::filesystem::path model = limited_copy(quantized_model({QuantProducer::modelopt, kNvfp4, {}}));
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 37);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 38);
  const ToolRun r = run_moe_logits_f32(model, x, logits);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("; gpt-oss's clamped SwiGLU (alpha 1.702, limit 0.5); strategy "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("within bounds"), std::string::npos) << r.out;
  const std::vector<float> y = SafetensorsFile::open(out().string()).tensor("y").to_vector<float>();
  MoeConfig config;
  EXPECT_EQ(as_bits(y), library_moe_logits_bits(Checkpoint::open(model), x, logits, config));
  ASSERT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
}

// --activation replaces config.json's: the clamped form with limit 0.5 chosen on a plain-SwiGLU
// checkpoint gives the library's bits for the copy whose config.json says swiglu_limit 0.5 (and
// passes --check against the reference with that activation); `swiglu` on that copy gives the
// plain checkpoint's bits.
TEST_F(RunCommand, ActivationOptionReplacesConfigJsons) {
  const std::filesystem::path source = quantized_model({QuantProducer::modelopt, kNvfp4, {}});
  const std::filesystem::path limited = limited_copy(source);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 41);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 42);
  const auto run = [&](const std::filesystem::path& model, const std::string& extra) {
    const ToolRun r = run_layer(model, "model.layers.0",
                                Inputs().bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits),
                                "--output-dtype f32 --check " + extra);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("within bounds"), std::string::npos) << r.out;
    return std::make_pair(r.out, as_bits(SafetensorsFile::open(out().string()).tensor("y").to_vector<float>()));
  };
  MoeConfig config;
  const std::vector<std::uint32_t> limited_bits = library_moe_logits_bits(Checkpoint::open(limited), x, logits, config);
  ASSERT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
  const std::vector<std::uint32_t> plain_bits = library_moe_logits_bits(Checkpoint::open(source), x, logits, config);
  ASSERT_NE(limited_bits, plain_bits);
  const auto [chosen_out, chosen] = run(source, "--activation swiglu_clamped --swiglu-limit 0.5");
  EXPECT_NE(chosen_out.find("; gpt-oss's clamped SwiGLU (alpha 1.702, limit 0.5); strategy "), std::string::npos)
      << chosen_out;
  EXPECT_EQ(chosen, limited_bits);
  const auto [plain_out, plain] = run(limited, "--activation swiglu");
  EXPECT_NE(plain_out.find("; SwiGLU; strategy "), std::string::npos) << plain_out;
  EXPECT_EQ(plain, plain_bits);
}

TEST_F(RunCommand, MoeRoutingOptionsOverrideConfigJson) {
  const std::filesystem::path model = quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}});
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 35);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 36);
  const ToolRun r = run_layer(model, "model.layers.0.mlp.experts",
                              Inputs().bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits),
                              "--topk 3 --no-renormalize --check");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("top-3, not renormalized"), std::string::npos) << r.out;
  const std::vector<std::uint16_t> bits =
      SafetensorsFile::open(out().string()).tensor("y").to_vector<std::uint16_t>(Dtype::bf16);
  const Checkpoint ckpt = Checkpoint::open(model);
  reference::MoeReferenceOptions ro;
  ro.scheme = kNvfp4;
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0").experts, ro, x,
                                            reference::routing_from_logits(logits, kTokens, 4, 3, false));
  EXPECT_EQ(moe_outside_bound(ref, bf16_moe_run(bits), MoeOutput::bf16, "fp4cl run --topk 3 --no-renormalize"), 0u);
}

// A DeepSeek-V3-style gate (config.json's sigmoid, groups and scaling, the checkpoint's correction
// bias) is what `fp4cl run` routes router logits with: it says so, its check passes, and its
// bits are the library's for MoeConfig::from_checkpoint. Without the bias tensor it refuses the
// logits, naming the tensor.
TEST_F(RunCommand, MoeRoutesWithTheCheckpointsDeepSeekGate) {
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  const std::filesystem::path model = deepseek_checkpoint(scratch.path() / "deepseek", &bias);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 43);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 44);
  const ToolRun r = run_moe_logits_f32(model, x, logits);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("router logits (sigmoid, 2 groups (1 kept), correction bias, × 2.5), top-2 (config.json), "
                       "renormalized"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("within bounds"), std::string::npos) << r.out;
  const std::vector<float> y = SafetensorsFile::open(out().string()).tensor("y").to_vector<float>();
  MoeConfig config;
  EXPECT_EQ(as_bits(y), library_moe_logits_bits(Checkpoint::open(model), x, logits, config));
  EXPECT_EQ(config.logit_routing.correction_bias, bias);

  const std::filesystem::path no_bias = deepseek_checkpoint(scratch.path() / "no-bias", nullptr);
  const ToolRun refused = run_moe_logits_f32(no_bias, x, logits);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.err.find("no tensor 'model.layers.0.mlp.gate.e_score_correction_bias'; pass topk_ids and "
                             "topk_weights instead of router_logits"),
            std::string::npos)
      << describe(refused);
}

// A shared expert by its prefix: run as one expert with weight 1, checked, the library's bits
// (Checkpoint::load_mlp as an MoE layer of one expert); MoE options are refused for it.
TEST_F(RunCommand, SharedExpertRunsAsAGatedMlp) {
  const std::filesystem::path model =
      with_shared_expert(quantized_model({QuantProducer::modelopt, kNvfp4, {}}), scratch.path() / "shared");
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 45);
  const std::string prefix = "model.layers.0.mlp.shared_experts";
  const ToolRun r = run_layer(model, prefix, Inputs().bf16("x", kTokens, 64, x), "--output-dtype f32 --check");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("layer " + prefix + ": gated MLP (gate_proj, up_proj, down_proj as one expert), NVFP4 W4A4"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("within bounds"), std::string::npos) << r.out;
  const std::vector<float> y = SafetensorsFile::open(out().string()).tensor("y").to_vector<float>();
  const LoadedExperts loaded = Checkpoint::open(model).load_mlp(prefix);
  MoeConfig config;
  config.scheme = loaded.scheme;
  config.top_k = 1;
  config.output = MoeOutput::fp32;
  config.max_tokens = kTokens;
  MoeLayer layer = MoeLayer::create(shared_context(), loaded.experts, config);
  const Context& ctx = shared_context();
  const std::vector<std::int32_t> ids(kTokens, 0);
  const std::vector<float> ones(kTokens, 1.0f);
  auto copy = [&](const void* data, std::size_t bytes) {
    return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
  };
  const cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * 4);
  layer.forward_topk(copy(x.data(), x.size() * 2), copy(ids.data(), kTokens * 4), copy(ones.data(), kTokens * 4), ob,
                     kTokens);
  std::vector<float> expected(x.size());
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, expected.size() * 4, expected.data()), CL_SUCCESS);
  EXPECT_EQ(as_bits(y), as_bits(expected));
  const ToolRun refused = run_layer(model, prefix, Inputs().bf16("x", kTokens, 64, x), "--topk 2");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE((refused.out + refused.err).find("apply to MoE layers; '" + prefix + "' is a gated MLP"), std::string::npos)
      << describe(refused);
}

// --shared-experts fuses the layer's shared expert, here one of twice the routed experts'
// intermediate size (two experts of theirs), into a DeepSeek-style layer: the check (the reference
// with the shared slots after the routed ones) passes, and the bits are the library's for
// MoeLoadOptions::shared_experts.
TEST_F(RunCommand, FusedSharedExpertRunsWithTheGate) {
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  const std::filesystem::path model =
      with_shared_expert(deepseek_checkpoint(scratch.path() / "deepseek", &bias), scratch.path() / "shared", 2);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 47);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 48);
  const ToolRun r = run_layer(model, "model.layers.0",
                              Inputs().bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits),
                              "--output-dtype f32 --check --shared-experts");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("E=4 + 2 shared (fused) H=64 I=32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("within bounds"), std::string::npos) << r.out;
  const std::vector<float> y = SafetensorsFile::open(out().string()).tensor("y").to_vector<float>();
  const Checkpoint ckpt = Checkpoint::open(model);
  MoeConfig config;
  std::vector<std::uint32_t> unfused = library_moe_logits_bits(ckpt, x, logits, config);
  EXPECT_NE(as_bits(y), unfused);
  MoeLoadOptions load;
  load.shared_experts = true;
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config, load);
  EXPECT_EQ(as_bits(y), run_moe_logits(layer, config, x, logits, kTokens).bits);
}

// `fp4cl inspect` names the MoE layers' shared experts and how they fuse: one of the routed size
// as 1 expert, one of twice it as 2; none, no line (and null in --json).
TEST_F(RunCommand, InspectNamesTheSharedExpertsAndHowTheyFuse) {
  const std::filesystem::path plain = quantized_model({QuantProducer::modelopt, kNvfp4, {}});
  for (const int parts : {1, 2}) {
    const std::filesystem::path model =
        with_shared_expert(plain, scratch.path() / ("shared" + std::to_string(parts)), parts);
    const ToolRun text = run_tool("inspect '" + model.string() + "'", scratch);
    ASSERT_EQ(text.status, 0) << describe(text);
    EXPECT_NE(text.out.find(fmt::format("  shared     model.layers.0.mlp.shared_experts, I {}: fuses as {} expert{} of "
                                        "the routed size (fp4cl run --shared-experts)\n",
                                        32 * parts, parts, parts == 1 ? "" : "s")),
              std::string::npos)
        << text.out;
    const ToolRun json = run_tool("inspect --json '" + model.string() + "'", scratch);
    ASSERT_EQ(json.status, 0) << describe(json);
    const nlohmann::json shared = nlohmann::json::parse(json.out).at("moe").at("shared_experts");
    EXPECT_EQ(shared.at("layers"), 1);
    EXPECT_EQ(shared.at("first"), "model.layers.0.mlp.shared_experts");
    EXPECT_EQ(shared.at("intermediate"), 32 * parts);
    EXPECT_EQ(shared.at("fused_experts"), parts);
  }
  const ToolRun none = run_tool("inspect '" + plain.string() + "'", scratch);
  ASSERT_EQ(none.status, 0) << describe(none);
  EXPECT_EQ(none.out.find("  shared "), std::string::npos) << none.out;
  const ToolRun none_json = run_tool("inspect --json '" + plain.string() + "'", scratch);
  EXPECT_TRUE(nlohmann::json::parse(none_json.out).at("moe").at("shared_experts").is_null());
}

TEST_F(RunCommand, MoeFromPrecomputedTopk) {
  const std::filesystem::path model = quantized_model({QuantProducer::compressed_tensors, kMxfp4A16, {}});
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 37);
  const std::vector<std::int64_t> ids = {0, 1, 1, 2, 2, 3, 3, 0, 0, 0};  // the last token names expert 0 twice
  const std::vector<float> weights = {0.5f, 0.25f, 1.0f, 0.125f, 0.75f, 0.5f, 0.3f, 0.7f, 0.5f, 0.5f};
  const ToolRun r = run_layer(
      model, "model.layers.0",
      Inputs().bf16("x", kTokens, 64, x).add("topk_ids", kTokens, 2, ids).add("topk_weights", kTokens, 2, weights),
      "--check");
  ASSERT_EQ(r.status, 0) << describe(r);
  const std::vector<std::uint16_t> bits =
      SafetensorsFile::open(out().string()).tensor("y").to_vector<std::uint16_t>(Dtype::bf16);
  reference::MoeReferenceOptions ro;
  ro.scheme = kMxfp4A16;
  const std::vector<std::int32_t> ids32(ids.begin(), ids.end());
  const auto ref = reference::moe_reference(Checkpoint::open(model).load_moe("model.layers.0").experts, ro, x,
                                            reference::routing_from_topk(ids32, weights, kTokens, 2));
  EXPECT_EQ(moe_outside_bound(ref, bf16_moe_run(bits), MoeOutput::bf16, "fp4cl run with topk_ids"), 0u);
}

struct BadRun {
  std::string what, layer;
  std::function<void(Inputs&)> inputs;
  std::string extra;
  std::vector<std::string> expected;  // substrings of stderr
};

TEST_F(RunCommand, ArgumentErrorsAreClear) {
  const std::filesystem::path model = quantized_model({QuantProducer::compressed_tensors, kNvfp4, {}});
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 38);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 39);
  const std::vector<BadRun> cases = {
      {"unknown layer",
       "model.layers.0.self_attn.x_proj",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "",
       {"no quantized layer 'model.layers.0.self_attn.x_proj'", kQProj, "model.layers.0.mlp.experts (MoE)"}},
      {"unquantized module",
       "model.layers.0.mlp.gate",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "",
       {"no quantized linear module 'model.layers.0.mlp.gate'", "not quantized"}},
      {"missing x",
       kQProj,
       [&](Inputs& in) { in.add("X", kTokens, 64, std::vector<float>(kTokens * 64)); },
       "",
       {"no tensor 'x'", "the file holds: X"}},
      {"wrong dtype",
       kQProj,
       [&](Inputs& in) { in.add("x", kTokens, 64, std::vector<std::int32_t>(kTokens * 64)); },
       "",
       {"tensor 'x' is I32", "expected BF16 or F32"}},
      {"wrong shape",
       kQProj,
       [&](Inputs& in) { in.bf16("x", kTokens, 32, std::vector<std::uint16_t>(kTokens * 32)); },
       "",
       {"tensor 'x' is BF16 [5, 32]; expected BF16 or F32 [T, 64]"}},
      {"no routing",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "",
       {"no routing for MoE layer 'model.layers.0.mlp.experts'", "router_logits [T, 4]"}},
      {"both routings",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits);
         in.add("topk_ids", kTokens, 2, std::vector<std::int32_t>(kTokens * 2))
             .add("topk_weights", kTokens, 2, std::vector<float>(kTokens * 2, 0.5f));
       },
       "",
       {"either router_logits or topk_ids with topk_weights, not both"}},
      {"logits of another expert count",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 8, gaussian_logits(kTokens, 8, 1));
       },
       "",
       {"tensor 'router_logits' is F32 [5, 8]; expected F32 or BF16 [5, 4]"}},
      {"topk weights missing",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("topk_ids", kTokens, 2, std::vector<std::int32_t>(kTokens * 2));
       },
       "",
       {"no tensor 'topk_weights'"}},
      {"topk rows differ from x",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("topk_ids", 3, 2, std::vector<std::int32_t>(6));
         in.add("topk_weights", 3, 2, std::vector<float>(6, 0.5f));
       },
       "",
       {"tensor 'topk_ids' is I32 [3, 2]; expected I32 or I64 [5, 2]"}},
      {"invalid expert id",
       "model.layers.0",
       [&](Inputs& in) {
         std::vector<std::int32_t> ids(kTokens * 2, 1);
         ids[7] = 9;
         in.bf16("x", kTokens, 64, x)
             .add("topk_ids", kTokens, 2, ids)
             .add("topk_weights", kTokens, 2, std::vector<float>(kTokens * 2, 0.5f));
       },
       "",
       {"9", "outside"}},
      {"--topk disagrees with topk_ids",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("topk_ids", kTokens, 2, std::vector<std::int32_t>(kTokens * 2));
         in.add("topk_weights", kTokens, 2, std::vector<float>(kTokens * 2, 0.5f));
       },
       "--topk 3",
       {"topk_ids has 2 columns but --topk is 3"}},
      {"--renormalize with topk_weights",
       "model.layers.0",
       [&](Inputs& in) {
         in.bf16("x", kTokens, 64, x).add("topk_ids", kTokens, 2, std::vector<std::int32_t>(kTokens * 2));
         in.add("topk_weights", kTokens, 2, std::vector<float>(kTokens * 2, 0.5f));
       },
       "--no-renormalize",
       {"apply to router logits", "used as given"}},
      {"--topk on a linear",
       kQProj,
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "--topk 2",
       {"--topk / --renormalize / --activation / --shared-experts apply to MoE layers"}},
      {"--activation on a linear",
       kQProj,
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "--activation swiglu",
       {"--activation / --shared-experts apply to MoE layers"}},
      {"unknown activation",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits); },
       "--activation gelu",
       {"--activation", "gelu"}},
      {"--swiglu-limit without --activation",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits); },
       "--swiglu-limit 2",
       {"need --activation swiglu_clamped"}},
      {"--swiglu-alpha with swiglu",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits); },
       "--activation swiglu --swiglu-alpha 1",
       {"takes no --swiglu-alpha"}},
      {"a limit of 0",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x).add("router_logits", kTokens, 4, logits); },
       "--activation swiglu_clamped --swiglu-limit 0",
       {"--swiglu-limit 0: must be finite and above 0"}},
      {"both renormalize flags",
       "model.layers.0",
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "--renormalize --no-renormalize",
       {"excludes"}},
      {"bad output dtype",
       kQProj,
       [&](Inputs& in) { in.bf16("x", kTokens, 64, x); },
       "--output-dtype fp16",
       {"--output-dtype"}},
  };
  for (const BadRun& c : cases) {
    Inputs in;
    c.inputs(in);
    const ToolRun r = run_layer(model, c.layer, in, c.extra);
    EXPECT_NE(r.status, 0) << c.what << "\n" << describe(r);
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << c.what << ": '" << e << "'\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(out())) << c.what << ": no output on an error";
  }
  // A missing checkpoint or input file names it.
  ToolRun r = run_tool(run_args(scratch.path() / "nowhere", kQProj, scratch.path() / "in.safetensors", out()), scratch);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
  r = run_tool(run_args(model, kQProj, scratch.path() / "missing.safetensors", out()), scratch);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("missing.safetensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4cl::test
