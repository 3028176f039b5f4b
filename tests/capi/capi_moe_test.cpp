// C API MoE layers: host arrays (top-k and router logits) and the caller's buffers with events
// give the same bits as the C++ API (fp4cl::MoeLayer) for every layout and scheme and lie within
// the scalar reference's bound; expert_map, batch_invariant, invalid expert ids, sizes and options
// are checked.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi/capi_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/moe_reference.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr std::int64_t kTokens = 6;
constexpr int kTopK = 2;

struct Routing {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};
Routing routing(std::int64_t tokens) {
  Routing r;
  for (std::int64_t t = 0; t < tokens; ++t) {
    r.ids.push_back(static_cast<std::int32_t>(t % 4));
    r.ids.push_back(static_cast<std::int32_t>((t + 1 + t / 4) % 4));
    r.weights.push_back(0.625f);
    r.weights.push_back(0.375f);
  }
  return r;
}

// The C++ API's output bits for the same inputs (its own device buffers); Out: std::uint16_t
// (BF16 bits) or float, as config.output says.
template <typename Out = std::uint16_t>
std::vector<Out> cpp_topk(const Checkpoint& ckpt, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                          const Routing& r, std::int64_t tokens) {
  const Context& ctx = shared_context();
  MoeLayer layer = MoeLayer::from_checkpoint(ctx, ckpt, "model.layers.0", config);
  auto copy = [&](const void* data, std::size_t bytes) {
    return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
  };
  const cl::Buffer xb = copy(x.data(), x.size() * 2), ib = copy(r.ids.data(), r.ids.size() * 4),
                   wb = copy(r.weights.data(), r.weights.size() * 4);
  const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * sizeof(Out));
  layer.forward_topk(xb, ib, wb, out, tokens);
  std::vector<Out> y(x.size());
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, y.size() * sizeof(Out), y.data()), CL_SUCCESS);
  return y;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

std::vector<std::uint16_t> c_topk(fp4cl_moe* layer, const std::vector<std::uint16_t>& x, const Routing& r,
                                  std::int64_t tokens) {
  std::vector<std::uint16_t> out(x.size(), 0x7FC1);
  EXPECT_EQ(fp4cl_moe_run(layer, x.data(), x.size() * 2, r.ids.data(), r.ids.size() * 4, r.weights.data(),
                          r.weights.size() * 4, tokens, out.data(), out.size() * 2),
            FP4CL_SUCCESS)
      << fp4cl_last_error();
  return out;
}

class CapiMoeEveryScheme : public testing::TestWithParam<Variant> {};

TEST_P(CapiMoeEveryScheme, HostRunIsBitIdenticalToTheCppApiAndWithinTheReference) {
  ModelPtr model = open_model(GetParam());
  const Checkpoint ckpt = Checkpoint::open(quantized_model(GetParam()));
  MoePtr layer = get_moe(model.get(), "model.layers.0.mlp.experts");
  fp4cl_moe_info info;
  ASSERT_EQ(fp4cl_moe_get_info(layer.get(), &info), FP4CL_SUCCESS);
  EXPECT_EQ(info.num_experts, 4);
  EXPECT_EQ(info.num_local_experts, 4);
  EXPECT_EQ(info.hidden, 64);
  EXPECT_EQ(info.intermediate, 32);
  EXPECT_EQ(info.top_k, kTopK);
  EXPECT_EQ(info.max_tokens, 256);
  EXPECT_EQ(info.output, FP4CL_DTYPE_BF16);

  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 21);
  const Routing r = routing(kTokens);
  const std::vector<std::uint16_t> out = c_topk(layer.get(), x, r, kTokens);
  EXPECT_EQ(out, cpp_topk(ckpt, MoeConfig::from_checkpoint(ckpt, "model.layers.0"), x, r, kTokens));

  reference::MoeReferenceOptions ro;
  ro.scheme = GetParam().scheme;
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0").experts, ro, x,
                                            reference::routing_from_topk(r.ids, r.weights, kTokens, kTopK));
  MoeRun run;
  for (std::uint16_t b : out) {
    run.values.push_back(bf16_to_float(b));
    run.bits.push_back(b);
  }
  EXPECT_EQ(moe_outside_bound(ref, run, MoeOutput::bf16, variant_name(GetParam())), 0u);

  // Router logits: the C++ API's bits too.
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 22);
  std::vector<std::uint16_t> from_logits(x.size());
  ASSERT_EQ(fp4cl_moe_run_logits(layer.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                 from_logits.data(), from_logits.size() * 2),
            FP4CL_SUCCESS)
      << fp4cl_last_error();
  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  MoeLayer cpp = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
  const MoeRun expected = run_moe_logits(cpp, config, x, logits, kTokens);
  std::vector<std::uint32_t> bits(from_logits.begin(), from_logits.end());
  EXPECT_EQ(bits, expected.bits);
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutAndScheme, CapiMoeEveryScheme, testing::ValuesIn(every_layout_and_scheme()),
                         [](const testing::TestParamInfo<Variant>& p) { return variant_name(p.param); });

// config.json's clamped SwiGLU (gpt-oss: a swiglu_limit) reaches C API layers as it reaches
// MoeConfig::from_checkpoint: the same bits, and not those of plain SwiGLU.
TEST(CapiMoe, ConfigJsonsActivationIsTheCppApis) {
  TempDir scratch("fp4cl-capi-swiglu");
  const std::filesystem::path dir = scratch.path() / "model";
  std::filesystem::copy(quantized_model(default_variant()), dir);
  nlohmann::json config_json = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  config_json["swiglu_limit"] = 0.5;
  std::ofstream(dir / "config.json") << config_json.dump(2);

  fp4cl_model* m = nullptr;
  ASSERT_EQ(fp4cl_model_open(c_context(), dir.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  ModelPtr model(m);
  MoePtr layer = get_moe(model.get(), "model.layers.0.mlp.experts");
  fp4cl_moe_activation activation;
  ASSERT_EQ(fp4cl_moe_get_activation(layer.get(), &activation), FP4CL_SUCCESS) << fp4cl_last_error();
  EXPECT_EQ(activation.kind, FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED);
  EXPECT_EQ(activation.alpha, 1.702f);
  EXPECT_EQ(activation.limit, 0.5f);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 31);
  const Routing r = routing(kTokens);
  const std::vector<std::uint16_t> out = c_topk(layer.get(), x, r, kTokens);
  const Checkpoint ckpt = Checkpoint::open(dir);
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  ASSERT_EQ(config.activation.kind, MoeActivation::Kind::swiglu_clamped);
  EXPECT_EQ(out, cpp_topk(ckpt, config, x, r, kTokens));
  config.activation = MoeActivation{};
  EXPECT_NE(out, cpp_topk(ckpt, config, x, r, kTokens));
}

// config.json's DeepSeek-V3 gate with the checkpoint's correction bias routes C API logits as it
// routes MoeConfig::from_checkpoint's: the same bits, not softmax top-k's. Without the bias the
// logit call fails naming the tensor, and top-k ids still run.
TEST(CapiMoe, ConfigJsonsGateIsTheCppApis) {
  TempDir scratch("fp4cl-capi-gate");
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  const std::filesystem::path dir = deepseek_checkpoint(scratch.path() / "model", &bias);
  fp4cl_model* m = nullptr;
  ASSERT_EQ(fp4cl_model_open(c_context(), dir.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  ModelPtr model(m);
  MoePtr layer = get_moe(model.get(), "model.layers.0");
  fp4cl_moe_routing gate;
  ASSERT_EQ(fp4cl_moe_get_routing(layer.get(), &gate), FP4CL_SUCCESS) << fp4cl_last_error();
  EXPECT_EQ(gate.logits, 1);
  EXPECT_EQ(gate.scoring, FP4CL_MOE_SCORING_SIGMOID);
  EXPECT_EQ(gate.groups, 2);
  EXPECT_EQ(gate.top_groups, 1);
  EXPECT_EQ(gate.correction_bias, 1);
  EXPECT_EQ(gate.renormalize, 1);
  EXPECT_EQ(gate.scaling_factor, 2.5f);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 35);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 36);
  std::vector<std::uint16_t> out(x.size());
  ASSERT_EQ(fp4cl_moe_run_logits(layer.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                 out.data(), out.size() * 2),
            FP4CL_SUCCESS)
      << fp4cl_last_error();
  const Checkpoint ckpt = Checkpoint::open(dir);
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  ASSERT_EQ(config.logit_routing.correction_bias, bias);
  MoeLayer cpp = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
  EXPECT_EQ(std::vector<std::uint32_t>(out.begin(), out.end()), run_moe_logits(cpp, config, x, logits, kTokens).bits);
  config.logit_routing = MoeLogitRouting{};
  MoeLayer softmax = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
  EXPECT_NE(std::vector<std::uint32_t>(out.begin(), out.end()),
            run_moe_logits(softmax, config, x, logits, kTokens).bits);

  const std::filesystem::path no_bias = deepseek_checkpoint(scratch.path() / "no-bias", nullptr);
  ASSERT_EQ(fp4cl_model_open(c_context(), no_bias.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  ModelPtr unbiased(m);
  MoePtr refusing = get_moe(unbiased.get(), "model.layers.0");
  ASSERT_EQ(fp4cl_moe_get_routing(refusing.get(), &gate), FP4CL_SUCCESS) << fp4cl_last_error();
  EXPECT_EQ(gate.logits, 0);
  ModelPtr plain_model = open_model();
  MoePtr plain = get_moe(plain_model.get(), "model.layers.0");
  ASSERT_EQ(fp4cl_moe_get_routing(plain.get(), &gate), FP4CL_SUCCESS) << fp4cl_last_error();
  EXPECT_EQ(gate.logits, 1);
  EXPECT_EQ(gate.scoring, FP4CL_MOE_SCORING_SOFTMAX);
  EXPECT_EQ(gate.groups, 1);
  EXPECT_EQ(gate.correction_bias, 0);
  EXPECT_EQ(gate.scaling_factor, 1.0f);
  EXPECT_NE(fp4cl_moe_run_logits(refusing.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                 out.data(), out.size() * 2),
            FP4CL_SUCCESS);
  EXPECT_NE(std::string(fp4cl_last_error()).find("no tensor 'model.layers.0.mlp.gate.e_score_correction_bias'"),
            std::string::npos)
      << fp4cl_last_error();
  EXPECT_EQ(c_topk(refusing.get(), x, routing(kTokens), kTokens).size(), x.size());
}

// fp4cl_model_get_moe_with_shared_experts: a DeepSeek-style layer (its gate from config.json) with
// its shared expert fused, one of the routed size and one of twice it (two experts): the C++ API's
// bits for MoeLoadOptions::shared_experts, from logits and from top-k ids, by name and by index;
// without a shared expert, or with an expert_map, a clear error.
TEST(CapiMoe, FusedSharedExpertsAreTheCppApis) {
  TempDir scratch("fp4cl-capi-fused-shared");
  const std::vector<float> bias = {0.25f, -0.125f, 0.0f, 0.5f};
  const std::filesystem::path gated = deepseek_checkpoint(scratch.path() / "gated", &bias);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 41);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 42);
  const Routing r = routing(kTokens);
  for (const int parts : {1, 2}) {
    SCOPED_TRACE("parts " + std::to_string(parts));
    const std::filesystem::path dir =
        with_shared_expert(gated, scratch.path() / ("model" + std::to_string(parts)), parts);
    fp4cl_model* m = nullptr;
    ASSERT_EQ(fp4cl_model_open(c_context(), dir.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
    ModelPtr model(m);
    fp4cl_moe* raw = nullptr;
    ASSERT_EQ(fp4cl_model_get_moe_with_shared_experts(model.get(), "model.layers.0", nullptr, nullptr, &raw),
              FP4CL_SUCCESS)
        << fp4cl_last_error();
    MoePtr layer(raw);
    std::int32_t shared = -1;
    ASSERT_EQ(fp4cl_moe_get_shared_experts(layer.get(), &shared), FP4CL_SUCCESS);
    EXPECT_EQ(shared, parts);
    fp4cl_moe_info info;
    ASSERT_EQ(fp4cl_moe_get_info(layer.get(), &info), FP4CL_SUCCESS);
    EXPECT_EQ(info.num_experts, 4);
    EXPECT_EQ(info.num_local_experts, 4 + parts);
    EXPECT_EQ(info.top_k, kTopK);
    std::vector<std::uint16_t> from_logits(x.size());
    ASSERT_EQ(fp4cl_moe_run_logits(layer.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                   from_logits.data(), from_logits.size() * 2),
              FP4CL_SUCCESS)
        << fp4cl_last_error();
    const std::vector<std::uint16_t> from_ids = c_topk(layer.get(), x, r, kTokens);

    const Checkpoint ckpt = Checkpoint::open(dir);
    const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
    MoeLoadOptions load;
    load.shared_experts = true;
    MoeLayer cpp = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config, load);
    EXPECT_EQ(std::vector<std::uint32_t>(from_logits.begin(), from_logits.end()),
              run_moe_logits(cpp, config, x, logits, kTokens).bits);
    MoeLayer plain = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config);
    EXPECT_NE(std::vector<std::uint32_t>(from_logits.begin(), from_logits.end()),
              run_moe_logits(plain, config, x, logits, kTokens).bits);  // the shared expert adds something
    const Context& ctx = shared_context();
    auto copy = [&](const void* data, std::size_t bytes) {
      return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
    };
    const cl::Buffer xb = copy(x.data(), x.size() * 2), ib = copy(r.ids.data(), r.ids.size() * 4),
                     wb = copy(r.weights.data(), r.weights.size() * 4);
    const cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * 2);
    cpp.forward_topk(xb, ib, wb, ob, kTokens);
    std::vector<std::uint16_t> expected(x.size());
    ASSERT_EQ(ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, expected.size() * 2, expected.data()), CL_SUCCESS);
    EXPECT_EQ(from_ids, expected);

    fp4cl_moe* at = nullptr;
    ASSERT_EQ(fp4cl_model_get_moe_at_with_shared_experts(model.get(), 0, nullptr, nullptr, &at), FP4CL_SUCCESS)
        << fp4cl_last_error();
    MoePtr by_index(at);
    EXPECT_EQ(c_topk(by_index.get(), x, r, kTokens), from_ids);

    fp4cl_moe_options o;
    fp4cl_moe_options_init(&o);
    const std::int32_t map[4] = {0, 1, 2, 3};
    o.expert_map = map;
    o.expert_map_size = 4;
    fp4cl_moe* none = nullptr;
    expect_error(fp4cl_model_get_moe_with_shared_experts(model.get(), "model.layers.0", &o, nullptr, &none),
                 FP4CL_ERROR_INVALID_ARGUMENT, {"options->expert_map with the shared experts fused"});
  }
  ModelPtr qwen = open_model();
  MoePtr unfused = get_moe(qwen.get(), "model.layers.0");
  std::int32_t shared = -1;
  ASSERT_EQ(fp4cl_moe_get_shared_experts(unfused.get(), &shared), FP4CL_SUCCESS);
  EXPECT_EQ(shared, 0);
  fp4cl_model* m = nullptr;
  ASSERT_EQ(fp4cl_model_open(c_context(), gated.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  ModelPtr without(m);
  fp4cl_moe* none = nullptr;
  expect_error(fp4cl_model_get_moe_with_shared_experts(without.get(), "model.layers.0", nullptr, nullptr, &none),
               FP4CL_ERROR_NOT_FOUND,
               {"MoE layer 'model.layers.0.mlp.experts' has no shared expert to fuse",
                "'model.layers.0.mlp.shared_experts.gate_proj'"});
}

// fp4cl_model_get_mlp: a shared expert (here expert 1's projections again, under
// "model.layers.0.mlp.shared_experts") as one expert with k = 1: the C++ API's bits for
// Checkpoint::load_mlp, the same as routing every token to expert 1 of the MoE layer with weight 1
// within the reference's bound; it has no router; bad names and options are refused.
TEST(CapiMoe, SharedExpertAsAnMlpIsTheCppApis) {
  TempDir scratch("fp4cl-capi-mlp");
  const std::filesystem::path dir = with_shared_expert(quantized_model(default_variant()), scratch.path() / "model");
  fp4cl_model* m = nullptr;
  ASSERT_EQ(fp4cl_model_open(c_context(), dir.string().c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  ModelPtr model(m);
  fp4cl_moe* raw = nullptr;
  ASSERT_EQ(fp4cl_model_get_mlp(model.get(), "model.layers.0.mlp.shared_experts", nullptr, &raw), FP4CL_SUCCESS)
      << fp4cl_last_error();
  MoePtr mlp(raw);
  fp4cl_moe_info info;
  ASSERT_EQ(fp4cl_moe_get_info(mlp.get(), &info), FP4CL_SUCCESS);
  EXPECT_EQ(info.num_experts, 1);
  EXPECT_EQ(info.top_k, 1);
  Routing ones;
  ones.ids.assign(kTokens, 0);
  ones.weights.assign(kTokens, 1.0f);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 61);
  const std::vector<std::uint16_t> out = c_topk(mlp.get(), x, ones, kTokens);

  const Checkpoint ckpt = Checkpoint::open(dir);
  const LoadedExperts loaded = ckpt.load_mlp("model.layers.0.mlp.shared_experts");
  MoeConfig config;
  config.scheme = loaded.scheme;
  config.top_k = 1;
  MoeLayer cpp = MoeLayer::create(shared_context(), loaded.experts, config);
  const Context& ctx = shared_context();
  auto copy = [&](const void* data, std::size_t bytes) {
    return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
  };
  const cl::Buffer xb = copy(x.data(), x.size() * 2), ib = copy(ones.ids.data(), kTokens * 4),
                   wb = copy(ones.weights.data(), kTokens * 4);
  const cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * 2);
  cpp.forward_topk(xb, ib, wb, ob, kTokens);
  std::vector<std::uint16_t> expected(x.size());
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, expected.size() * 2, expected.data()), CL_SUCCESS);
  EXPECT_EQ(out, expected);
  // The routed layer's expert 1 with weight 1: the same function (within the reference's bound).
  Routing to_one;
  to_one.ids.assign(kTokens, 1);
  to_one.weights.assign(kTokens, 1.0f);
  reference::MoeReferenceOptions ro;
  ro.scheme = loaded.scheme;
  const auto ref = reference::moe_reference(ckpt.load_moe("model.layers.0").experts, ro, x,
                                            reference::routing_from_topk(to_one.ids, to_one.weights, kTokens, 1));
  MoeRun run;
  for (std::uint16_t b : out) {
    run.values.push_back(bf16_to_float(b));
    run.bits.push_back(b);
  }
  EXPECT_EQ(moe_outside_bound(ref, run, MoeOutput::bf16, "shared expert"), 0u);

  fp4cl_moe_routing routing;
  ASSERT_EQ(fp4cl_moe_get_routing(mlp.get(), &routing), FP4CL_SUCCESS);
  EXPECT_EQ(routing.logits, 0);
  std::vector<float> logits(kTokens, 0.0f);
  std::vector<std::uint16_t> y(x.size());
  EXPECT_NE(fp4cl_moe_run_logits(mlp.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                 y.data(), y.size() * 2),
            FP4CL_SUCCESS);
  EXPECT_NE(std::string(fp4cl_last_error()).find("is an MLP: pass topk_ids 0 and topk_weights 1"), std::string::npos)
      << fp4cl_last_error();

  fp4cl_moe* none = nullptr;
  EXPECT_EQ(fp4cl_model_get_mlp(model.get(), "model.layers.0.mlp", nullptr, &none), FP4CL_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(fp4cl_last_error()).find("'model.layers.0.mlp.gate_proj'"), std::string::npos)
      << fp4cl_last_error();
  fp4cl_moe_options o;
  fp4cl_moe_options_init(&o);
  o.top_k = 2;
  EXPECT_EQ(fp4cl_model_get_mlp(model.get(), "model.layers.0.mlp.shared_experts", &o, &none),
            FP4CL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fp4cl_last_error()).find("options->top_k = 2: an MLP is one expert"), std::string::npos);
  fp4cl_moe_options_init(&o);
  o.renormalize = 1;
  EXPECT_EQ(fp4cl_model_get_mlp(model.get(), "model.layers.0.mlp.shared_experts", &o, &none),
            FP4CL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
}

// fp4cl_model_get_moe_with_activation: the caller's activation replaces config.json's (here plain
// SwiGLU's checkpoint given gpt-oss's clamped form, by name and by index), with the C++ API's bits;
// NULL keeps config.json's; bad kinds and parameters are refused naming the field.
TEST(CapiMoe, ActivationChosenByTheCallerIsTheCppApis) {
  ModelPtr model = open_model();
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 37);
  const Routing r = routing(kTokens);
  const Checkpoint ckpt = Checkpoint::open(quantized_model(default_variant()));
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  ASSERT_EQ(config.activation.kind, MoeActivation::Kind::swiglu);
  const std::vector<std::uint16_t> plain = cpp_topk(ckpt, config, x, r, kTokens);
  config.activation = {MoeActivation::Kind::swiglu_clamped, 1.5f, 0.25f};
  const std::vector<std::uint16_t> clamped = cpp_topk(ckpt, config, x, r, kTokens);
  ASSERT_NE(plain, clamped);

  const fp4cl_moe_activation chosen{FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED, 1.5f, 0.25f};
  std::size_t index = 0;
  ASSERT_EQ(fp4cl_model_find_layer(model.get(), "model.layers.0", &index), FP4CL_SUCCESS) << fp4cl_last_error();
  for (const bool by_index : {false, true}) {
    fp4cl_moe* m = nullptr;
    const fp4cl_status status =
        by_index ? fp4cl_model_get_moe_at_with_activation(model.get(), index, nullptr, &chosen, &m)
                 : fp4cl_model_get_moe_with_activation(model.get(), "model.layers.0", nullptr, &chosen, &m);
    ASSERT_EQ(status, FP4CL_SUCCESS) << fp4cl_last_error();
    MoePtr layer(m);
    fp4cl_moe_activation got;
    ASSERT_EQ(fp4cl_moe_get_activation(layer.get(), &got), FP4CL_SUCCESS);
    EXPECT_EQ(got.kind, FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED);
    EXPECT_EQ(got.alpha, 1.5f);
    EXPECT_EQ(got.limit, 0.25f);
    EXPECT_EQ(c_topk(layer.get(), x, r, kTokens), clamped) << (by_index ? "by index" : "by name");
  }
  {
    fp4cl_moe* m = nullptr;
    ASSERT_EQ(fp4cl_model_get_moe_with_activation(model.get(), "model.layers.0", nullptr, nullptr, &m), FP4CL_SUCCESS)
        << fp4cl_last_error();
    MoePtr layer(m);
    EXPECT_EQ(c_topk(layer.get(), x, r, kTokens), plain);
  }
  const auto refused = [&](fp4cl_moe_activation a, const std::vector<std::string>& fragments) {
    fp4cl_moe* m = nullptr;
    expect_error(fp4cl_model_get_moe_with_activation(model.get(), "model.layers.0", nullptr, &a, &m),
                 FP4CL_ERROR_INVALID_ARGUMENT, fragments);
    EXPECT_EQ(m, nullptr);
  };
  refused({7, 0.0f, 0.0f}, {"activation->kind = 7"});
  refused({FP4CL_MOE_ACTIVATION_SWIGLU, 1.702f, 7.0f}, {"SWIGLU takes neither"});
  refused({FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED, 0.0f, 7.0f}, {"activation->alpha = 0"});
  refused({FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED, 1.702f, std::numeric_limits<float>::infinity()},
          {"activation->limit = inf"});
  refused({FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED, std::numeric_limits<float>::quiet_NaN(), 7.0f},
          {"activation->alpha = nan"});
}

// fp4cl_moe_describe_kernel: the C++ API's description of the strategy and tiles that serve a
// call (copied as fp4cl_linear_describe_kernel copies: tested there); bad arguments named.
TEST(CapiMoe, KernelDescriptionIsTheCppApis) {
  ModelPtr model = open_model();
  MoePtr layer = get_moe(model.get(), "model.layers.0");
  const Checkpoint ckpt = Checkpoint::open(quantized_model(default_variant()));
  const MoeLayer cpp =
      MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", MoeConfig::from_checkpoint(ckpt, "model.layers.0"));
  for (const std::int64_t tokens : {std::int64_t{1}, std::int64_t{64}}) {
    const std::string expected = cpp.kernel_description(tokens);
    EXPECT_EQ(expected.rfind(cpp.strategy_for(tokens) + ": tile_m ", 0), 0u) << expected;
    std::size_t length = 0;
    ASSERT_EQ(fp4cl_moe_describe_kernel(layer.get(), tokens, nullptr, 0, &length), FP4CL_SUCCESS)
        << fp4cl_last_error();
    std::vector<char> text(length + 1);
    ASSERT_EQ(fp4cl_moe_describe_kernel(layer.get(), tokens, text.data(), text.size(), nullptr), FP4CL_SUCCESS);
    EXPECT_EQ(std::string(text.data()), expected) << tokens << " tokens";
  }
  char text[8];
  expect_error(fp4cl_moe_describe_kernel(layer.get(), -1, text, sizeof text, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"tokens = -1: must be 1 to 2^31 - 1"});
  expect_error(fp4cl_moe_describe_kernel(layer.get(), 1, nullptr, 8, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"buffer is NULL with size 8"});
  expect_error(fp4cl_moe_describe_kernel(nullptr, 1, text, sizeof text, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"layer is NULL"});
}

TEST(CapiMoe, ExpertMapAndFp32OutputMatchTheCppApi) {
  ModelPtr model = open_model();
  const Checkpoint ckpt = Checkpoint::open(quantized_model(default_variant()));
  // Six global experts; this rank holds global 1 -> local 3 and global 4 -> local 0.
  const std::vector<std::int32_t> map = {-1, 3, -1, -1, 0, -1};
  fp4cl_moe_options o;
  fp4cl_moe_options_init(&o);
  o.expert_map = map.data();
  o.expert_map_size = map.size();
  o.output = FP4CL_DTYPE_FP32;
  o.max_tokens = 4;  // 6 tokens run in two chunks
  MoePtr layer = get_moe(model.get(), "model.layers.0", &o);
  fp4cl_moe_info info;
  ASSERT_EQ(fp4cl_moe_get_info(layer.get(), &info), FP4CL_SUCCESS);
  EXPECT_EQ(info.num_experts, 6);
  EXPECT_EQ(info.num_local_experts, 4);
  fp4cl_moe_activation activation;  // config.json without model_type gpt_oss or swiglu_limit
  ASSERT_EQ(fp4cl_moe_get_activation(layer.get(), &activation), FP4CL_SUCCESS);
  EXPECT_EQ(activation.kind, FP4CL_MOE_ACTIVATION_SWIGLU);
  EXPECT_EQ(activation.alpha, 0.0f);
  EXPECT_EQ(activation.limit, 0.0f);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 31);
  Routing r;
  for (std::int64_t t = 0; t < kTokens; ++t) {
    r.ids.insert(r.ids.end(), {static_cast<std::int32_t>(t % 6), static_cast<std::int32_t>((t + 3) % 6)});
    r.weights.insert(r.weights.end(), {0.5f, 0.25f});
  }
  std::vector<float> out(x.size());
  ASSERT_EQ(fp4cl_moe_run(layer.get(), x.data(), x.size() * 2, r.ids.data(), r.ids.size() * 4, r.weights.data(),
                          r.weights.size() * 4, kTokens, out.data(), out.size() * 4),
            FP4CL_SUCCESS)
      << fp4cl_last_error();

  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  config.expert_map = map;
  config.output = MoeOutput::fp32;
  config.max_tokens = 4;
  const Context& ctx = shared_context();
  MoeLayer cpp = MoeLayer::from_checkpoint(ctx, ckpt, "model.layers.0", config);
  const cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                      const_cast<std::uint16_t*>(x.data()));
  const cl::Buffer ib(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, r.ids.size() * 4, r.ids.data());
  const cl::Buffer wb(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, r.weights.size() * 4,
                      r.weights.data());
  const cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, out.size() * 4);
  cpp.forward_topk(xb, ib, wb, ob, kTokens);
  std::vector<float> expected(out.size());
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, expected.size() * 4, expected.data()), CL_SUCCESS);
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * 4), 0);
  // Tokens 2 and 5 route only to experts another rank holds (2, 5): their rows are zero.
  for (std::int64_t t : {2, 5})
    for (std::int64_t h = 0; h < 64; ++h) EXPECT_EQ(out[static_cast<std::size_t>(t * 64 + h)], 0.0f);
}

TEST(CapiMoe, HostRunRefusesAnInvalidExpertIdNamingTheSlot) {
  ModelPtr model = open_model();
  MoePtr layer = get_moe(model.get(), "model.layers.0");
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 41);
  Routing r = routing(kTokens);
  std::vector<std::uint16_t> out(x.size(), 0x1234);
  r.ids[7] = 4;  // token 3, slot 1
  expect_error(fp4cl_moe_run(layer.get(), x.data(), x.size() * 2, r.ids.data(), r.ids.size() * 4, r.weights.data(),
                             r.weights.size() * 4, kTokens, out.data(), out.size() * 2),
               FP4CL_ERROR_INVALID_EXPERT_ID, {"topk_ids[3, 1] = 4 is outside [0, 4)"});
  r.ids[7] = 1;
  r.ids[0] = -3;
  expect_error(fp4cl_moe_run(layer.get(), x.data(), x.size() * 2, r.ids.data(), r.ids.size() * 4, r.weights.data(),
                             r.weights.size() * 4, kTokens, out.data(), out.size() * 2),
               FP4CL_ERROR_INVALID_EXPERT_ID, {"topk_ids[0, 0] = -3"});
  EXPECT_EQ(out, std::vector<std::uint16_t>(x.size(), 0x1234));  // nothing written
}

TEST(CapiMoe, EnqueueWithEventsOnTheCallersQueueAndFinishReportsInvalidIds) {
  const CallerQueue& q = caller_queue();
  fp4cl_context* raw = nullptr;
  ASSERT_EQ(fp4cl_context_wrap(q.context, q.queue, &raw), FP4CL_SUCCESS);
  ContextPtr ctx(raw);
  fp4cl_model* m = nullptr;
  const std::string dir = quantized_model(default_variant()).string();
  ASSERT_EQ(fp4cl_model_open(ctx.get(), dir.c_str(), &m), FP4CL_SUCCESS);
  ModelPtr model(m);
  MoePtr layer = get_moe(model.get(), "model.layers.0");
  EXPECT_EQ(fp4cl_moe_finish(layer.get()), FP4CL_SUCCESS);  // nothing enqueued yet

  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 51);
  Routing r = routing(kTokens);
  const std::vector<std::uint16_t> host = c_topk(layer.get(), x, r, kTokens);
  cl_mem xb = create_buffer(q.context, x.size() * 2), ib = create_buffer(q.context, r.ids.size() * 4),
         wb = create_buffer(q.context, r.weights.size() * 4), ob = create_buffer(q.context, x.size() * 2);
  cl_event writes[3];
  ASSERT_EQ(clEnqueueWriteBuffer(q.queue, xb, CL_FALSE, 0, x.size() * 2, x.data(), 0, nullptr, &writes[0]), CL_SUCCESS);
  ASSERT_EQ(clEnqueueWriteBuffer(q.queue, ib, CL_FALSE, 0, r.ids.size() * 4, r.ids.data(), 0, nullptr, &writes[1]),
            CL_SUCCESS);
  ASSERT_EQ(clEnqueueWriteBuffer(q.queue, wb, CL_FALSE, 0, r.weights.size() * 4, r.weights.data(), 0, nullptr,
                                 &writes[2]),
            CL_SUCCESS);
  cl_event done = nullptr;
  ASSERT_EQ(fp4cl_moe_enqueue(layer.get(), xb, ib, wb, ob, kTokens, 3, writes, &done), FP4CL_SUCCESS)
      << fp4cl_last_error();
  std::vector<std::uint16_t> device(x.size());
  ASSERT_EQ(clEnqueueReadBuffer(q.queue, ob, CL_TRUE, 0, device.size() * 2, device.data(), 1, &done, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(fp4cl_moe_finish(layer.get()), FP4CL_SUCCESS) << fp4cl_last_error();
  EXPECT_EQ(device, host);
  clReleaseEvent(done);

  // An invalid id on the device path: the device skips the slot; finish names it.
  const std::int32_t bad_id = 9;
  ASSERT_EQ(clEnqueueWriteBuffer(q.queue, ib, CL_TRUE, 5 * 4, 4, &bad_id, 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(fp4cl_moe_enqueue(layer.get(), xb, ib, wb, ob, kTokens, 0, nullptr, &done), FP4CL_SUCCESS);
  expect_error(fp4cl_moe_finish(layer.get()), FP4CL_ERROR_INVALID_EXPERT_ID, {"topk_ids[2, 1] = 9"});
  EXPECT_EQ(fp4cl_moe_finish(layer.get()), FP4CL_SUCCESS);  // reported once
  clReleaseEvent(done);

  // Router logits on the device path, and tokens = 0 gives a marker event.
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 52);
  std::vector<std::uint16_t> host_logits(x.size()), device_logits(x.size());
  ASSERT_EQ(fp4cl_moe_run_logits(layer.get(), x.data(), x.size() * 2, logits.data(), logits.size() * 4, kTokens,
                                 host_logits.data(), host_logits.size() * 2),
            FP4CL_SUCCESS);
  cl_mem lb = create_buffer(q.context, logits.size() * 4, logits.data());
  ASSERT_EQ(fp4cl_moe_enqueue_logits(layer.get(), xb, lb, ob, kTokens, 0, nullptr, &done), FP4CL_SUCCESS)
      << fp4cl_last_error();
  ASSERT_EQ(clEnqueueReadBuffer(q.queue, ob, CL_TRUE, 0, device_logits.size() * 2, device_logits.data(), 1, &done,
                                nullptr),
            CL_SUCCESS);
  EXPECT_EQ(device_logits, host_logits);
  clReleaseEvent(done);
  cl_event empty = nullptr;
  ASSERT_EQ(fp4cl_moe_enqueue(layer.get(), xb, ib, wb, ob, 0, 0, nullptr, &empty), FP4CL_SUCCESS);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(clWaitForEvents(1, &empty), CL_SUCCESS);
  clReleaseEvent(empty);

  // Bad buffers.
  cl_context other = nullptr;
  ASSERT_EQ(fp4cl_context_get_cl(c_context(), &other, nullptr, nullptr), FP4CL_SUCCESS);
  cl_mem foreign = create_buffer(other, 64), small = create_buffer(q.context, 16);
  expect_error(fp4cl_moe_enqueue(layer.get(), xb, nullptr, wb, ob, kTokens, 0, nullptr, nullptr),
               FP4CL_ERROR_INVALID_ARGUMENT, {"the topk_ids buffer is NULL"});
  expect_error(fp4cl_moe_enqueue(layer.get(), xb, ib, foreign, ob, kTokens, 0, nullptr, nullptr),
               FP4CL_ERROR_INVALID_ARGUMENT, {"topk_weights buffer belongs to another"});
  expect_error(fp4cl_moe_enqueue(layer.get(), xb, small, wb, ob, kTokens, 0, nullptr, nullptr),
               FP4CL_ERROR_INVALID_ARGUMENT, {"topk_ids buffer has 16 bytes"});
  expect_error(fp4cl_moe_enqueue_logits(layer.get(), xb, small, ob, kTokens, 0, nullptr, nullptr),
               FP4CL_ERROR_INVALID_ARGUMENT, {"router_logits buffer has 16 bytes"});
  expect_error(fp4cl_moe_enqueue(layer.get(), xb, ib, wb, ob, -2, 0, nullptr, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"tokens = -2"});
  for (cl_event e : writes) clReleaseEvent(e);
  for (cl_mem b : {xb, ib, wb, ob, lb, foreign, small}) clReleaseMemObject(b);
}

TEST(CapiMoe, HostRunRefusesWrongSizesNamingTheArray) {
  ModelPtr model = open_model();
  MoePtr layer = get_moe(model.get(), "model.layers.0");
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 61);
  const Routing r = routing(kTokens);
  std::vector<std::uint16_t> out(x.size());
  const fp4cl_status bad = FP4CL_ERROR_INVALID_ARGUMENT;
  auto run = [&](std::size_t xb, std::size_t ib, std::size_t wb, std::size_t ob) {
    return fp4cl_moe_run(layer.get(), x.data(), xb, r.ids.data(), ib, r.weights.data(), wb, kTokens, out.data(), ob);
  };
  const std::size_t X = x.size() * 2, P = r.ids.size() * 4;
  expect_error(run(X - 1, P, P, X), bad, {"x has 767 bytes", "[T, H] = [6, 64] BF16 needs 768"});
  expect_error(run(X, P - 4, P, X), bad, {"topk_ids has 44 bytes", "[T, k] = [6, 2] int32 needs 48"});
  expect_error(run(X, P, 8, X), bad, {"topk_weights has 8 bytes"});
  expect_error(run(X, P, P, 2), bad, {"out has 2 bytes"});
  expect_error(fp4cl_moe_run(layer.get(), x.data(), X, nullptr, P, r.weights.data(), P, kTokens, out.data(), X), bad,
               {"topk_ids is NULL"});
  const std::vector<float> logits(kTokens * 4);
  expect_error(fp4cl_moe_run_logits(layer.get(), x.data(), X, logits.data(), 20, kTokens, out.data(), X), bad,
               {"router_logits has 20 bytes", "[T, E_global] = [6, 4] fp32 needs 96"});
  EXPECT_EQ(fp4cl_moe_run(layer.get(), nullptr, 0, nullptr, 0, nullptr, 0, 0, nullptr, 0), FP4CL_SUCCESS);
}

// fp4cl_moe_options.batch_invariant reaches the layer: with it, 45 tokens cut into chunks of 7
// give the bits of one pass and of the C++ API's MoeConfig::batch_invariant. The grouped strategy
// (forced: the one whose bits depend on the batch) gives other bits without it on this data
// (W4A16, fp32 out: inexact fp32 sums), so a C API that dropped the flag would fail here.
TEST(CapiMoe, BatchInvariantKeepsTheBitsOfOnePassAndMatchesTheCppApi) {
  const ScopedEnv grouped("FP4CL_MOE_KERNEL", std::string("grouped"));
  Variant variant = default_variant();
  variant.scheme.activations = Activations::bf16;
  ModelPtr model = open_model(variant);
  const Checkpoint ckpt = Checkpoint::open(quantized_model(variant));
  const std::int64_t tokens = 45;
  const std::vector<std::uint16_t> x = gaussian_bf16(tokens, 64, 47);
  const Routing r = routing(tokens);
  auto c_run = [&](std::int64_t max_tokens, std::int32_t batch_invariant) {
    fp4cl_moe_options o;
    fp4cl_moe_options_init(&o);
    EXPECT_EQ(o.batch_invariant, 0);
    o.output = FP4CL_DTYPE_FP32;
    o.max_tokens = max_tokens;
    o.batch_invariant = batch_invariant;
    MoePtr layer = get_moe(model.get(), "model.layers.0", &o);
    std::vector<float> out(x.size());
    EXPECT_EQ(fp4cl_moe_run(layer.get(), x.data(), x.size() * 2, r.ids.data(), r.ids.size() * 4, r.weights.data(),
                            r.weights.size() * 4, tokens, out.data(), out.size() * 4),
              FP4CL_SUCCESS)
        << fp4cl_last_error();
    return bits(out);
  };
  MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  config.output = MoeOutput::fp32;
  config.max_tokens = 7;
  config.batch_invariant = true;
  const std::vector<std::uint32_t> invariant = bits(cpp_topk<float>(ckpt, config, x, r, tokens));
  config.batch_invariant = false;
  const std::vector<std::uint32_t> batch_dependent = bits(cpp_topk<float>(ckpt, config, x, r, tokens));
  ASSERT_NE(invariant, batch_dependent) << "the data no longer shows batch_invariant: choose data that does";
  EXPECT_EQ(c_run(7, 1), invariant);
  EXPECT_EQ(c_run(256, 1), invariant);
  EXPECT_EQ(c_run(7, 0), batch_dependent);
}

TEST(CapiMoe, GettingALayerChecksTheNameKindAndOptions) {
  ModelPtr model = open_model();
  fp4cl_moe* m = nullptr;
  expect_error(fp4cl_model_get_moe(model.get(), "model.layers.0.self_attn.q_proj", nullptr, &m), FP4CL_ERROR_NOT_FOUND,
               {"is a linear layer, not an MoE layer"});
  expect_error(fp4cl_model_get_moe(model.get(), "model.layers.3", nullptr, &m), FP4CL_ERROR_NOT_FOUND,
               {"model.layers.3"});
  // Options set from the defaults by `set` are refused as invalid, naming each of `fragments`.
  auto refused = [&](const std::function<void(fp4cl_moe_options&)>& set, const std::vector<std::string>& fragments) {
    fp4cl_moe_options o;
    fp4cl_moe_options_init(&o);
    set(o);
    expect_error(fp4cl_model_get_moe(model.get(), "model.layers.0", &o, &m), FP4CL_ERROR_INVALID_ARGUMENT, fragments);
  };
  const std::vector<std::int32_t> bad_map = {0, 1, 4};
  refused(
      [&](fp4cl_moe_options& o) {
        o.expert_map = bad_map.data();
        o.expert_map_size = bad_map.size();
      },
      {"expert_map[2] = 4", "[0, 4)"});
  refused([](fp4cl_moe_options& o) { o.expert_map_size = 3; }, {"expert_map is NULL"});
  refused([](fp4cl_moe_options& o) { o.top_k = 5; }, {"top_k = 5", "[1, 4]"});
  refused([](fp4cl_moe_options& o) { o.renormalize = 2; }, {"renormalize = 2"});
  refused([](fp4cl_moe_options& o) { o.batch_invariant = 2; }, {"batch_invariant = 2", "0 or 1"});
  refused([](fp4cl_moe_options& o) { o.max_tokens = -1; }, {"max_tokens = -1"});
  EXPECT_EQ(m, nullptr);
  // top_k set by hand: k = 1.
  fp4cl_moe_options o;
  fp4cl_moe_options_init(&o);
  o.top_k = 1;
  MoePtr k1 = get_moe(model.get(), "model.layers.0", &o);
  fp4cl_moe_info info;
  ASSERT_EQ(fp4cl_moe_get_info(k1.get(), &info), FP4CL_SUCCESS);
  EXPECT_EQ(info.top_k, 1);
}

}  // namespace
}  // namespace fp4cl::test
