// `fp4cl inspect`: the report behind it (groups, bytes, global-scale ranges, warnings), and the
// built tool itself — its text, its --json output parsed back, and its exit status on errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "fp4cl/model_config.hpp"
#include "load_test_support.hpp"
#include "support/cli_tool.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4A16{WeightFormat::mxfp4, Activations::bf16};

// The dequant-direction global scales (weight, input) the fixture stored for `modules`.
std::pair<ScaleRange, ScaleRange> fixture_ranges(const FixtureCheckpoint& f, const std::vector<std::string>& modules) {
  const float inf = std::numeric_limits<float>::infinity();
  ScaleRange w{inf, 0}, in{inf, 0};
  for (const std::string& m : modules) {
    const ExpectedModule& e = f.expected(m);
    w.add(e.weight.global_scale);
    in.add(1.0f / e.input_gs_quant);
  }
  return {w, in};
}

class Inspect : public testing::Test {
 protected:
  void SetUp() override {
    fixture_ = FixtureCheckpoint::build(moe_model(Layout::modelopt, kNvfp4, 3, 4));
    fixture_.write(model_.path());
  }
  FixtureCheckpoint fixture_;
  TempDir model_, scratch_;
};

TEST_F(Inspect, ReportGroupsLayersWithBytesAndScaleRanges) {
  const Checkpoint ckpt = Checkpoint::open(model_.path());
  const CheckpointReport r = inspect_checkpoint(ckpt);
  EXPECT_EQ(r.producer, "ModelOpt");
  EXPECT_EQ(r.shards, 1u);
  EXPECT_EQ(r.tensors, fixture_.tensors.size());
  EXPECT_EQ(r.layers.size(), ckpt.layers().size());
  ASSERT_EQ(r.groups.size(), 5u);  // experts, k, o, q, v projections — each over layers 0–2

  std::uint64_t quantized = 0;
  for (const auto& [name, t] : fixture_.tensors) {
    if (t.dtype != Dtype::bf16) quantized += t.bytes.size();
  }
  EXPECT_EQ(r.quantized_bytes, quantized);
  ASSERT_EQ(r.schemes.size(), 1u);
  EXPECT_EQ(r.schemes[0].first, kNvfp4);
  EXPECT_EQ(r.schemes[0].second, 15u);

  const LayerGroup& experts = r.groups.front();
  EXPECT_EQ(experts.label(), "model.layers.{0–2}.mlp.experts");
  EXPECT_EQ(experts.numbers, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(experts.total.layer.kind, LayerKind::moe);
  EXPECT_EQ(experts.total.layer.num_experts, 4);
  std::vector<std::string> expert_modules;
  std::int64_t mismatches = 0;
  for (const MoeSpec& m : fixture_.spec().moes) {
    for (std::int64_t e = 0; e < m.experts; ++e) {
      for (int p = 0; p < 3; ++p) expert_modules.push_back(expert_module(ExpertStyle::qwen3, m.prefix, e, p));
      mismatches += fixture_.expected(expert_module(ExpertStyle::qwen3, m.prefix, e, 0)).weight.global_scale !=
                    fixture_.expected(expert_module(ExpertStyle::qwen3, m.prefix, e, 1)).weight.global_scale;
    }
  }
  const auto [w, in] = fixture_ranges(fixture_, expert_modules);
  ASSERT_TRUE(experts.total.weight_global_scale && experts.total.input_scale);
  EXPECT_EQ(bits(experts.total.weight_global_scale->min), bits(w.min));
  EXPECT_EQ(bits(experts.total.weight_global_scale->max), bits(w.max));
  EXPECT_EQ(bits(experts.total.input_scale->min), bits(in.min));
  EXPECT_EQ(bits(experts.total.input_scale->max), bits(in.max));
  EXPECT_GT(mismatches, 0);
  EXPECT_EQ(experts.total.gate_up_scale_mismatches, mismatches);
  std::uint64_t moe_bytes = 0;
  for (const CheckpointLayer& l : ckpt.moe_layers()) moe_bytes += l.stored_bytes;
  EXPECT_EQ(experts.total.layer.stored_bytes, moe_bytes);

  EXPECT_EQ(r.groups[3].label(), "model.layers.{0–2}.self_attn.q_proj");
  EXPECT_EQ(r.groups[3].total.layer.out_features, 64);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("gate and up projections have different weight global scales in " +
                               std::to_string(mismatches) + " of 12 experts"),
            std::string::npos)
      << r.warnings[0];
}

TEST(InspectGroups, LabelsListLayerNumbersWithGaps) {
  ModelSpec spec = dense_model(Layout::compressed_tensors, kMxfp4A16, 5, 64, 64);
  spec.linears.erase(std::remove_if(spec.linears.begin(), spec.linears.end(),
                                    [](const LinearSpec& l) { return l.module == "model.layers.2.self_attn.q_proj"; }),
                     spec.linears.end());
  spec.linears.push_back({"lm_head_extra", 32, 64});
  TempDir dir;
  FixtureCheckpoint::build(spec).write(dir.path());
  const CheckpointReport r = inspect_checkpoint(Checkpoint::open(dir.path()));
  std::vector<std::string> labels;
  for (const LayerGroup& g : r.groups) labels.push_back(g.label());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "model.layers.{0–1, 3–4}.self_attn.q_proj"), labels.end());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "model.layers.{0–4}.mlp.down_proj"), labels.end());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "lm_head_extra"), labels.end());
  for (const LayerGroup& g : r.groups) {
    EXPECT_FALSE(g.total.weight_global_scale) << "MXFP4 has no global scale";
    EXPECT_FALSE(g.total.input_scale);
  }
}

TEST_F(Inspect, ToolPrintsGroupedText) {
  const ToolRun run = run_tool("inspect '" + model_.str() + "'", scratch_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("producer   ModelOpt"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("schemes    NVFP4 W4A4 (15 layers)"), std::string::npos) << run.out;
  EXPECT_NE(
      run.out.find("model.layers.{0–2}.mlp.experts: MoE (Qwen3-MoE / DeepSeek), 4 experts, H 64, I 32, NVFP4 W4A4"),
      std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("model.layers.{0–2}.self_attn.k_proj: linear [32, 64], NVFP4 W4A4"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("weight gs_d ["), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("warnings\n  model.layers.{0–2}.mlp.experts: gate and up"), std::string::npos) << run.out;
}

// How the MoE layers run, as config.json says (what MoeConfig::from_checkpoint and the C API take).
TEST_F(Inspect, ToolSaysHowTheMoeLayersRun) {
  const ToolRun run = run_tool("inspect '" + model_.str() + "'", scratch_);
  ASSERT_EQ(run.status, 0) << run.err;
  const ModelConfig m = ModelConfig::load(model_.path());
  ASSERT_TRUE(m.experts_per_token);
  EXPECT_NE(run.out.find(fmt::format("  moe        top-{}, ", *m.experts_per_token)), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(", SwiGLU\n"), std::string::npos) << run.out;

  nlohmann::json config = nlohmann::json::parse(std::ifstream(model_.path() / "config.json"));
  config["model_type"] = "gpt_oss";
  config["swiglu_limit"] = 5.5;
  config.erase("norm_topk_prob");  // gpt-oss renormalizes
  config["scoring_func"] = "sqrtsoftplus";
  std::ofstream(model_.path() / "config.json") << config.dump(2);
  const ToolRun gpt = run_tool("inspect '" + model_.str() + "'", scratch_);
  ASSERT_EQ(gpt.status, 0) << gpt.err;
  EXPECT_NE(gpt.out.find("'s scoring_func 'sqrtsoftplus' is neither softmax nor sigmoid), gpt-oss's clamped SwiGLU "
                         "(alpha 1.702, limit 5.5)\n"),
            std::string::npos)
      << gpt.out;
  EXPECT_NE(gpt.out.find(", renormalized, precomputed routing only ("), std::string::npos) << gpt.out;
  const ToolRun json = run_tool("inspect --json '" + model_.str() + "'", scratch_);
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json moe = nlohmann::json::parse(json.out).at("moe");
  EXPECT_EQ(moe.at("top_k"), *m.experts_per_token);
  EXPECT_EQ(moe.at("renormalize"), true);
  EXPECT_EQ(moe.at("routing"), "precomputed");
  EXPECT_EQ(moe.at("activation").at("kind"), "swiglu_clamped");
  EXPECT_EQ(moe.at("activation").at("limit").get<float>(), 5.5f);
  EXPECT_EQ(moe.at("activation").at("alpha").get<float>(), 1.702f);

  // DeepSeek-V3's gate: routed on the device.
  config["model_type"] = "deepseek_v3";
  config["scoring_func"] = "sigmoid";
  config["topk_method"] = "noaux_tc";
  config["n_group"] = 2;
  config["topk_group"] = 1;
  config["routed_scaling_factor"] = 2.5;
  std::ofstream(model_.path() / "config.json") << config.dump(2);
  const ToolRun ds = run_tool("inspect '" + model_.str() + "'", scratch_);
  ASSERT_EQ(ds.status, 0) << ds.err;
  EXPECT_NE(ds.out.find(", sigmoid, 2 groups (1 kept), correction bias, × 2.5 routing on the device or precomputed, "),
            std::string::npos)
      << ds.out;
  const ToolRun ds_json = run_tool("inspect --json '" + model_.str() + "'", scratch_);
  ASSERT_EQ(ds_json.status, 0) << ds_json.err;
  const nlohmann::json ds_moe = nlohmann::json::parse(ds_json.out).at("moe");
  EXPECT_EQ(ds_moe.at("routing"), "grouped");
  EXPECT_EQ(ds_moe.at("logit_routing").at("scoring"), "sigmoid");
  EXPECT_EQ(ds_moe.at("logit_routing").at("groups"), 2);
  EXPECT_EQ(ds_moe.at("logit_routing").at("top_groups"), 1);
  EXPECT_EQ(ds_moe.at("logit_routing").at("correction_bias"), true);
  EXPECT_EQ(ds_moe.at("logit_routing").at("scaling_factor").get<float>(), 2.5f);
}

TEST_F(Inspect, ToolJsonParsesBackToTheReport) {
  const ToolRun run = run_tool("inspect --json '" + model_.str() + "'", scratch_);
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  const CheckpointReport r = inspect_checkpoint(Checkpoint::open(model_.path()));
  EXPECT_EQ(j.at("producer"), "ModelOpt");
  EXPECT_EQ(j.at("tensors").get<std::size_t>(), r.tensors);
  EXPECT_EQ(j.at("quantized_bytes").get<std::uint64_t>(), r.quantized_bytes);
  EXPECT_EQ(j.at("schemes").at("NVFP4 W4A4"), 15);
  ASSERT_EQ(j.at("groups").size(), r.groups.size());
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    const nlohmann::json& g = j.at("groups")[i];
    const LayerGroup& rg = r.groups[i];
    EXPECT_EQ(g.at("label"), rg.label());
    EXPECT_EQ(g.at("numbers").get<std::vector<std::int64_t>>(), rg.numbers);
    EXPECT_EQ(g.at("scheme"), rg.total.layer.scheme.name());
    EXPECT_EQ(g.at("bytes").get<std::uint64_t>(), rg.total.layer.stored_bytes);
    EXPECT_EQ(g.at("names").size(), rg.layers.size());
    // Scales survive the text round trip bit for bit.
    EXPECT_EQ(bits(g.at("weight_global_scale").at("min").get<float>()), bits(rg.total.weight_global_scale->min));
    EXPECT_EQ(bits(g.at("weight_global_scale").at("max").get<float>()), bits(rg.total.weight_global_scale->max));
    EXPECT_EQ(bits(g.at("input_scale").at("min").get<float>()), bits(rg.total.input_scale->min));
  }
  EXPECT_EQ(j.at("groups")[0].at("kind"), "moe");
  EXPECT_EQ(j.at("groups")[0].at("experts"), 4);
  EXPECT_EQ(j.at("groups")[0].at("gate_up_scale_mismatches").get<std::int64_t>(),
            r.groups[0].total.gate_up_scale_mismatches);
  ASSERT_EQ(j.at("layers").size(), r.layers.size());
  EXPECT_EQ(j.at("layers")[0].at("name"), r.layers[0].layer.name);
  EXPECT_EQ(j.at("warnings").get<std::vector<std::string>>(), r.warnings);
  EXPECT_TRUE(j.at("unsupported").empty());
}

TEST_F(Inspect, ToolFailsWithTheErrorMessage) {
  FixtureCheckpoint bad = fixture_;
  bad.tensors.erase(bad.scale_name("model.layers.1.self_attn.v_proj"));
  TempDir dir;
  bad.write(dir.path());
  const ToolRun run = run_tool("inspect '" + dir.str() + "'", scratch_);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("fp4cl: error:"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("'model.layers.1.self_attn.v_proj.weight_scale' is missing"), std::string::npos) << run.err;

  const ToolRun missing = run_tool("inspect '" + (dir.path() / "nowhere").string() + "'", scratch_);
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
}

TEST_F(Inspect, VerifyLoadsEveryLayer) {
  FixtureCheckpoint bad = fixture_;
  const std::string scale = bad.scale_name(expert_module(ExpertStyle::qwen3, "model.layers.2", 3, 1));
  bad.set_byte(scale, 5, 0x7F);
  TempDir dir;
  bad.write(dir.path());
  EXPECT_EQ(run_tool("inspect '" + dir.str() + "'", scratch_).status, 0);  // headers and global scales only
  const ToolRun run = run_tool("inspect --verify '" + dir.str() + "'", scratch_);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find(scale), std::string::npos) << run.err;
  const ToolRun good = run_tool("inspect --verify '" + model_.str() + "'", scratch_);
  EXPECT_EQ(good.status, 0) << good.err;
  EXPECT_NE(good.out.find("verified: every layer loads"), std::string::npos);
}

}  // namespace
}  // namespace fp4cl::test
