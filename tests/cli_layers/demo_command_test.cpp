// `fp4cl demo` with tiny sizes: the sections it prints, an existing checkpoint through --model,
// reuse of a work directory, and its argument errors.
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "support/cli_tool.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

const std::string kTiny =
    " --hidden 64 --inter 32 --experts 4 --topk 2 --heads 2 --kv-heads 1 --head-dim 32 --vocab 32 --tokens 3 "
    "--runs 1 --rows 4 --cols 64";

void expect_layer_sections(const ToolRun& r) {
  for (const std::string s :
       {"OpenCL devices (", "selected (FP4CL_DEVICE=", "MoE layer model.layers.0.mlp.experts:",
        "router logits = x · model.layers.0.mlp.gate.weightᵀ",
        "linear model.layers.0.self_attn.q_proj:", "µs per call (median of 1)", "GB/s", "demo: all checks passed"})
    EXPECT_NE(r.out.find(s), std::string::npos) << "'" << s << "'\n" << r.out;
  // Both layers checked against the reference.
  const std::string within = "check against the scalar reference: 192 outputs within bounds";
  const std::size_t first = r.out.find(within);
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(within, first + 1), std::string::npos) << r.out;
}

TEST(DemoCommand, SyntheticModelEndToEnd) {
  TempDir scratch("fp4cl-demo-test");
  const ToolRun r = run_tool("demo" + kTiny, scratch);
  ASSERT_EQ(r.status, 0) << describe(r);
  expect_layer_sections(r);
  EXPECT_NE(r.out.find("quantized to NVFP4 W4A4 in the ModelOpt layout"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bit-exact"), std::string::npos) << r.out;  // the round-trip section
}

TEST(DemoCommand, SchemeAndLayoutAndWorkDirReuse) {
  TempDir scratch("fp4cl-demo-test");
  const std::string args = "demo" + kTiny +
                           " --scheme mxfp4 --layout compressed-tensors --skip-round-trip --work-dir '" +
                           (scratch.path() / "models").string() + "'";
  ToolRun r = run_tool(args, scratch);
  ASSERT_EQ(r.status, 0) << describe(r);
  expect_layer_sections(r);
  EXPECT_NE(r.out.find("quantized to MXFP4 W4A4 in the compressed-tensors layout"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("round trip"), std::string::npos) << r.out;
  r = run_tool(args, scratch);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("model: reusing"), std::string::npos) << r.out;
}

TEST(DemoCommand, ExistingCheckpoint) {
  TempDir scratch("fp4cl-demo-test");
  const auto model = quantized_model({QuantProducer::compressed_tensors, {WeightFormat::nvfp4, Activations::bf16}, {}});
  const ToolRun r = run_tool("demo --model '" + model.string() + "' --tokens 3 --runs 1 --skip-round-trip", scratch);
  ASSERT_EQ(r.status, 0) << describe(r);
  expect_layer_sections(r);
  EXPECT_NE(r.out.find("NVFP4 W4A16 (compressed-tensors)"), std::string::npos) << r.out;
}

TEST(DemoCommand, ArgumentErrors) {
  TempDir scratch("fp4cl-demo-test");
  ToolRun r = run_tool("demo" + kTiny + " --scheme mxfp4 --layout modelopt", scratch);
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_NE(r.err.find("MXFP4"), std::string::npos) << r.err;
  r = run_tool("demo --model /nonexistent --scheme nvfp4", scratch);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
  r = run_tool("demo --hidden 64 --inter 32 --experts 4 --topk 2 --tokens 0", scratch);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--tokens and --runs must be at least 1"), std::string::npos) << r.err;
  r = run_tool("demo --model '" + (scratch.path() / "nowhere").string() + "'", scratch);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4cl::test
