// Layers created from checkpoints in one call (Linear::from_checkpoint, MoeLayer::from_checkpoint)
// for every layout and scheme the quantizer writes, against the scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_layers/checkpoint_layers_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/moe_reference.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr std::int64_t kTokens = 5;

class LayersFromCheckpoint : public testing::TestWithParam<Variant> {};

// Expert e of E experts stacked in v (equal parts).
template <typename T>
std::vector<T> expert_of(const std::vector<T>& v, std::int64_t experts, std::int64_t e) {
  const std::size_t per = v.size() / static_cast<std::size_t>(experts);
  return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(e)),
                        v.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(e + 1)));
}
// `v` as `blocks` blocks of rows of `row` elements each, every block's rows in reverse order.
template <typename T>
std::vector<T> reversed_rows(const std::vector<T>& v, std::size_t blocks, std::size_t row) {
  std::vector<T> out;
  const std::size_t rows = v.size() / blocks / row;
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t r = rows; r-- > 0;) {
      const auto first = v.begin() + static_cast<std::ptrdiff_t>((b * rows + r) * row);
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(row));
    }
  return out;
}

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

// Checkpoint::load_mlp: the shared expert's projections as one expert, the very arrays of the
// expert they copy, run as an MoE layer of one expert (top-k 1, weight 1) against the reference.
TEST_P(LayersFromCheckpoint, SharedExpertLoadsAsOneExpertAndRuns) {
  TempDir scratch("fp4cl-shared-expert");
  const Checkpoint ckpt = Checkpoint::open(with_shared_expert(quantized_model(GetParam()), scratch.path() / "model"));
  const LoadedExperts mlp = ckpt.load_mlp("model.layers.0.mlp.shared_experts");
  const LoadedExperts routed = ckpt.load_moe("model.layers.0");
  EXPECT_EQ(mlp.scheme, GetParam().scheme);
  const Fp4Experts& m = mlp.experts;
  const Fp4Experts& r = routed.experts;
  ASSERT_EQ(m.num_experts, 1);
  EXPECT_EQ(m.hidden, r.hidden);
  EXPECT_EQ(m.intermediate, r.intermediate);
  EXPECT_EQ(m.w13_packed, expert_of(r.w13_packed, r.num_experts, 1));
  EXPECT_EQ(m.w13_scales, expert_of(r.w13_scales, r.num_experts, 1));
  EXPECT_EQ(m.w2_packed, expert_of(r.w2_packed, r.num_experts, 1));
  EXPECT_EQ(m.w2_scales, expert_of(r.w2_scales, r.num_experts, 1));
  EXPECT_EQ(m.w13_global_scale, expert_of(r.w13_global_scale, r.num_experts, 1));
  EXPECT_EQ(m.w2_global_scale, expert_of(r.w2_global_scale, r.num_experts, 1));

  MoeConfig config;
  config.scheme = mlp.scheme;
  config.top_k = 1;
  MoeLayer layer = MoeLayer::create(shared_context(), m, config);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 7);
  const std::vector<std::int32_t> ids(kTokens, 0);
  const std::vector<float> weights(kTokens, 1.0f);
  const Context& ctx = shared_context();
  auto copy = [&](const void* data, std::size_t bytes) {
    return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
  };
  const cl::Buffer xb = copy(x.data(), x.size() * 2), ib = copy(ids.data(), ids.size() * 4),
                   wb = copy(weights.data(), weights.size() * 4);
  const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * 2);
  layer.forward_topk(xb, ib, wb, out, kTokens);
  std::vector<std::uint16_t> y(x.size());
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, y.size() * 2, y.data()), CL_SUCCESS);
  MoeRun run;
  for (std::uint16_t b : y) {
    run.values.push_back(bf16_to_float(b));
    run.bits.push_back(b);
  }
  reference::MoeReferenceOptions ro;
  ro.scheme = mlp.scheme;
  const auto ref = reference::moe_reference(m, ro, x, reference::routing_from_topk(ids, weights, kTokens, 1));
  EXPECT_EQ(moe_outside_bound(ref, run, MoeOutput::bf16, variant_name(GetParam()) + " shared expert"), 0u);
  EXPECT_GT(std::count_if(run.values.begin(), run.values.end(), [](float v) { return v != 0.0f; }), 200);

  const std::string e = error_of([&] { ckpt.load_mlp("model.layers.0.mlp"); });
  EXPECT_NE(e.find("no quantized linear module 'model.layers.0.mlp.gate_proj' for the MLP 'model.layers.0.mlp'"),
            std::string::npos)
      << e;
}

// MoeLoadOptions::shared_experts: the shared expert stacked after the routed ones and fused into
// the layer from the checkpoint (MoeConfig::shared_experts set by MoeLayer::from_checkpoint): router
// logits route the 4 routed experts and every token adds the shared one with weight 1, as the
// reference computes it.
TEST_P(LayersFromCheckpoint, SharedExpertFusesIntoTheMoeLayer) {
  TempDir scratch("fp4cl-fused-shared-expert");
  const Checkpoint ckpt = Checkpoint::open(with_shared_expert(quantized_model(GetParam()), scratch.path() / "model"));
  MoeLoadOptions load;
  load.shared_experts = true;
  const LoadedExperts stacked = ckpt.load_moe("model.layers.0", load);
  ASSERT_EQ(stacked.experts.num_experts, 5);
  EXPECT_EQ(stacked.shared_experts, 1);
  const Fp4Experts& e = stacked.experts;
  EXPECT_EQ(expert_of(e.w13_packed, 5, 4), expert_of(e.w13_packed, 5, 1));

  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config, load);
  EXPECT_EQ(layer.shared_experts(), 1);
  EXPECT_EQ(layer.num_global_experts(), 4);
  EXPECT_EQ(layer.num_local_experts(), 5);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 9);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 10);
  const MoeRun run = run_moe_logits(layer, config, x, logits, kTokens);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  const auto ref = reference::moe_reference(
      e, ro, x, reference::with_shared_experts(reference::routing_from_logits(logits, kTokens, 4, 2, true), 4, 1));
  EXPECT_EQ(moe_outside_bound(ref, run, config.output, variant_name(GetParam()) + " fused shared expert"), 0u);

  MoeConfig two = config;
  two.shared_experts = 2;
  EXPECT_ERROR_HAS(MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", two, load),
                   "MoeConfig::shared_experts is 2, but the load stacked 1 shared experts");
  const Checkpoint plain = Checkpoint::open(quantized_model(GetParam()));
  EXPECT_ERROR_HAS(plain.load_moe("model.layers.0", load), "'model.layers.0.mlp.shared_experts.gate_proj'");
}

// A shared expert of twice the routed experts' intermediate size (DeepSeek-V2's n_shared_experts
// = 2): stacked as two experts of theirs, part j of its intermediate rows (part 0 is expert 1,
// part 1 expert 1 with its rows reversed: with_shared_expert), fused as two shared experts, and
// the sum of the parts is the wide MLP's output (the references of the two forms agree).
TEST_P(LayersFromCheckpoint, WideSharedExpertSplitsIntoExpertsOfTheRoutedSize) {
  TempDir scratch("fp4cl-wide-shared-expert");
  const Checkpoint ckpt =
      Checkpoint::open(with_shared_expert(quantized_model(GetParam()), scratch.path() / "model", 2));
  const LoadedExperts routed = ckpt.load_moe("model.layers.0");
  const LoadedExperts wide = ckpt.load_mlp("model.layers.0.mlp.shared_experts");
  ASSERT_EQ(wide.experts.intermediate, 64);
  MoeLoadOptions load;
  load.shared_experts = true;
  const LoadedExperts stacked = ckpt.load_moe("model.layers.0", load);
  ASSERT_EQ(stacked.experts.num_experts, 6);
  EXPECT_EQ(stacked.shared_experts, 2);
  EXPECT_EQ(stacked.experts.intermediate, 32);
  const Fp4Experts& r = routed.experts;
  const Fp4Experts& e = stacked.experts;
  const std::size_t block = static_cast<std::size_t>(GetParam().scheme.block_size());
  for (std::int64_t j = 0; j < 2; ++j) {
    const auto part = [&](const auto& v) { return expert_of(v, 6, 4 + j); };
    const auto expert_1 = [&](const auto& v, std::size_t row_blocks, std::size_t row) {
      const auto x = expert_of(v, 4, 1);
      return j == 0 ? x : reversed_rows(x, row_blocks, row);
    };
    SCOPED_TRACE("part " + std::to_string(j));
    EXPECT_EQ(part(e.w13_packed), expert_1(r.w13_packed, 2, 32));  // gate rows, then up rows: H / 2 bytes a row
    EXPECT_EQ(part(e.w13_scales), expert_1(r.w13_scales, 2, 64 / block));
    EXPECT_EQ(part(e.w2_packed), expert_1(r.w2_packed, 1, 16));
    EXPECT_EQ(part(e.w2_scales), expert_1(r.w2_scales, 1, 32 / block));
    EXPECT_EQ(part(e.w13_global_scale), wide.experts.w13_global_scale);
    EXPECT_EQ(part(e.w2_global_scale), wide.experts.w2_global_scale);
    EXPECT_EQ(part(e.w13_input_global_scale), wide.experts.w13_input_global_scale);
    EXPECT_EQ(part(e.w2_input_global_scale), wide.experts.w2_input_global_scale);
  }
  for (std::int64_t x = 0; x < 4; ++x) EXPECT_EQ(expert_of(e.w13_packed, 6, x), expert_of(r.w13_packed, 4, x));

  const MoeConfig config = MoeConfig::from_checkpoint(ckpt, "model.layers.0");
  MoeLayer layer = MoeLayer::from_checkpoint(shared_context(), ckpt, "model.layers.0", config, load);
  EXPECT_EQ(layer.shared_experts(), 2);
  EXPECT_EQ(layer.num_global_experts(), 4);
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 11);
  const std::vector<float> logits = gaussian_logits(kTokens, 4, 12);
  const MoeRun run = run_moe_logits(layer, config, x, logits, kTokens);
  reference::MoeReferenceOptions ro;
  ro.scheme = config.scheme;
  const reference::MoeRouting routing = reference::routing_from_logits(logits, kTokens, 4, 2, true);
  const auto ref = reference::moe_reference(e, ro, x, reference::with_shared_experts(routing, 4, 2));
  EXPECT_EQ(moe_outside_bound(ref, run, config.output, variant_name(GetParam()) + " wide shared expert"), 0u);
  // The wide MLP on its own, plus the routed experts: the same sums but for their order.
  const auto ref_routed = reference::moe_reference(r, ro, x, routing);
  const std::vector<std::int32_t> zeros(kTokens, 0);
  const std::vector<float> ones(kTokens, 1.0f);
  const auto ref_wide =
      reference::moe_reference(wide.experts, ro, x, reference::routing_from_topk(zeros, ones, kTokens, 1));
  ASSERT_EQ(ref.value.size(), ref_wide.value.size());
  double largest = 0.0;
  for (std::size_t i = 0; i < ref.value.size(); ++i) {
    EXPECT_NEAR(ref.value[i], ref_routed.value[i] + ref_wide.value[i], 1e-9 * (1.0 + std::fabs(ref.value[i]))) << i;
    largest = std::max(largest, std::fabs(ref_wide.value[i]));
  }
  EXPECT_GT(largest, 0.01);  // the shared expert adds something
}

// Under ExpertInputScales::shared the routed experts share the widest of their own activation
// scales, and the fused shared expert keeps its own (vLLM runs it as an MLP of its own).
TEST_P(LayersFromCheckpoint, SharedExpertKeepsItsOwnActivationScales) {
  TempDir scratch("fp4cl-shared-expert-scales");
  const Checkpoint ckpt = Checkpoint::open(with_shared_expert(quantized_model(GetParam()), scratch.path() / "model"));
  MoeLoadOptions load;
  load.input_scales = ExpertInputScales::shared;
  const Fp4Experts routed = ckpt.load_moe("model.layers.0", load).experts;
  const Fp4Experts own = ckpt.load_mlp("model.layers.0.mlp.shared_experts").experts;
  load.shared_experts = true;
  const Fp4Experts e = ckpt.load_moe("model.layers.0", load).experts;
  for (const auto& [field, name] :
       {std::pair{&Fp4Experts::w13_input_global_scale, "w13_input_global_scale"},
        std::pair{&Fp4Experts::w2_input_global_scale, "w2_input_global_scale"},
        std::pair{&Fp4Experts::w13_input_scale, "w13_input_scale"},
        std::pair{&Fp4Experts::w2_input_scale, "w2_input_scale"}}) {
    SCOPED_TRACE(name);
    ASSERT_EQ((e.*field).size(), 5u);
    EXPECT_EQ(std::vector<float>((e.*field).begin(), (e.*field).begin() + 4), routed.*field);
    EXPECT_EQ((e.*field)[4], (own.*field)[0]);
  }
}

// A shared expert whose intermediate size is no multiple of the routed experts' is refused,
// naming both sizes (load_mlp still loads it).
TEST_P(LayersFromCheckpoint, SharedExpertOfAnotherSizeIsAClearError) {
  TempDir scratch("fp4cl-odd-shared-expert");
  copy_checkpoint(quantized_model(GetParam()), scratch.path() / "model",
                  [](SafetensorsWriter& writer, const SafetensorsFile& file) {
                    const std::string expert = "model.layers.0.mlp.experts.1.";
                    for (const TensorInfo& t : file.tensors()) {
                      if (t.name.rfind(expert, 0) != 0) continue;
                      const std::string name = "model.layers.0.mlp.shared_experts." + t.name.substr(expert.size());
                      const TensorView v = file.tensor(t.name);
                      if (t.shape.size() == 2 && t.name.find(".down_proj.") == std::string::npos)  // 16 of 32 rows
                        writer.add(name, t.dtype, {t.shape[0] / 2, t.shape[1]}, v.bytes().data(), v.bytes().size() / 2);
                      else
                        writer.add(name, v);
                    }
                  });
  const Checkpoint ckpt = Checkpoint::open(scratch.path() / "model");
  MoeLoadOptions load;
  load.shared_experts = true;
  EXPECT_ERROR_HAS(ckpt.load_moe("model.layers.0", load),
                   "the shared expert 'model.layers.0.mlp.shared_experts' of MoE layer "
                   "'model.layers.0.mlp.experts' is " +
                       GetParam().scheme.name() + " with hidden size 64 and intermediate size 16, the routed experts " +
                       GetParam().scheme.name() + " with 64 and 32");
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutAndScheme, LayersFromCheckpoint, testing::ValuesIn(every_layout_and_scheme()),
                         [](const testing::TestParamInfo<Variant>& p) { return variant_name(p.param); });

}  // namespace
}  // namespace fp4cl::test
