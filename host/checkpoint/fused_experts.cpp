// gpt-oss's fused MXFP4 expert tensors: finding, binding and loading them.
#include "checkpoint/fused_experts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "checkpoint/quantized_module.hpp"  // bias_values
#include "prepare/block_scales.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

constexpr std::string_view kGateUpBlocks = "gate_up_proj_blocks";

std::string tensor_name(const std::string& layer, std::string_view suffix) { return fmt::format("{}.{}", layer, suffix); }

TensorView require(const SafetensorsModel& model, const std::string& layer, std::string_view suffix) {
  const std::string name = tensor_name(layer, suffix);
  if (std::optional<TensorView> t = model.find(name)) return *t;
  fail("gpt-oss MoE layer '{}': no tensor '{}' in {} (its fused experts need gate_up_proj_blocks, "
       "gate_up_proj_scales, down_proj_blocks and down_proj_scales)",
       layer, name, model.source());
}

void expect(const TensorView& t, std::initializer_list<Dtype> dtypes, const std::vector<std::int64_t>& shape,
            const std::string& what) {
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) {
    std::string names;
    for (const Dtype d : dtypes) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
    fail("tensor '{}' in '{}' is {}; expected {} ({})", t.name(), t.file(), dtype_name(t.dtype()), names, what);
  }
  if (t.shape() != shape)
    fail("tensor '{}' in '{}' has shape {}; expected {} ({})", t.name(), t.file(), shape_string(t.shape()),
         shape_string(shape), what);
}

}  // namespace

std::uint64_t FusedExperts::stored_bytes() const {
  return gate_up_blocks.bytes().size() + gate_up_scales.bytes().size() + down_blocks.bytes().size() +
         down_scales.bytes().size();
}

std::vector<std::string> fused_expert_layers(const SafetensorsModel& model) {
  std::vector<std::string> out;
  for (const SafetensorsFile& shard : model.shards()) {
    for (const TensorInfo& t : shard.tensors()) {
      const std::string_view name = t.name;
      if (name.size() > kGateUpBlocks.size() + 1 && name.substr(name.size() - kGateUpBlocks.size()) == kGateUpBlocks &&
          name[name.size() - kGateUpBlocks.size() - 1] == '.')
        out.emplace_back(name.substr(0, name.size() - kGateUpBlocks.size() - 1));
    }
  }
  return out;
}

FusedExperts bind_fused_experts(const SafetensorsModel& model, const std::string& layer, const QuantScheme& scheme) {
  if (scheme.weight != WeightFormat::mxfp4)
    fail("gpt-oss MoE layer '{}': fused experts are MXFP4, but the config gives {}", layer, scheme.name());
  const TensorView gate_up_blocks = require(model, layer, kGateUpBlocks);
  const std::vector<std::int64_t>& g = gate_up_blocks.shape();
  if (gate_up_blocks.dtype() != Dtype::u8 || g.size() != 4 || g[3] != 16 || g[0] < 1 || g[1] < 2 || g[1] % 2 != 0 ||
      g[2] < 1)
    fail("tensor '{}' in '{}' is {} {}; expected U8 [E, 2I, H/32, 16] (gpt-oss's MXFP4 codes, 16 bytes a block of 32)",
         gate_up_blocks.name(), gate_up_blocks.file(), dtype_name(gate_up_blocks.dtype()), shape_string(g));
  const std::int64_t E = g[0], I = g[1] / 2, H = g[2] * 32;
  if (I % 32 != 0)
    fail("tensor '{}' in '{}' has 2I = {} rows: I = {} is not a multiple of 32 (down_proj's blocks of 32 along I)",
         gate_up_blocks.name(), gate_up_blocks.file(), g[1], I);
  const TensorView gate_up_scales = require(model, layer, "gate_up_proj_scales");
  const TensorView down_blocks = require(model, layer, "down_proj_blocks");
  const TensorView down_scales = require(model, layer, "down_proj_scales");
  const auto scales = {Dtype::u8, Dtype::f8_e8m0};
  const std::string sizes = fmt::format("E = {}, I = {}, H = {} from {}", E, I, H, gate_up_blocks.name());
  expect(gate_up_scales, scales, {E, 2 * I, H / 32}, sizes);
  expect(down_blocks, {Dtype::u8}, {E, H, I / 32, 16}, sizes);
  expect(down_scales, scales, {E, H, I / 32}, sizes);
  const std::optional<TensorView> gate_up_bias = model.find(tensor_name(layer, "gate_up_proj_bias"));
  const std::optional<TensorView> down_bias = model.find(tensor_name(layer, "down_proj_bias"));
  if (gate_up_bias.has_value() != down_bias.has_value()) {
    const TensorView& has = gate_up_bias ? *gate_up_bias : *down_bias;
    fail("gpt-oss MoE layer '{}' has '{}' but no '{}': its experts have both biases or neither", layer, has.name(),
         tensor_name(layer, gate_up_bias ? "down_proj_bias" : "gate_up_proj_bias"));
  }
  if (gate_up_bias) {
    expect(*gate_up_bias, {Dtype::bf16, Dtype::f32}, {E, 2 * I}, sizes);
    expect(*down_bias, {Dtype::bf16, Dtype::f32}, {E, H}, sizes);
  }
  return FusedExperts{layer, scheme, E, H, I, gate_up_blocks, gate_up_scales, down_blocks, down_scales,
                      gate_up_bias, down_bias};
}

Fp4Experts load_fused_experts(const FusedExperts& f) {
  check_block_scales(f.gate_up_scales, WeightFormat::mxfp4);
  check_block_scales(f.down_scales, WeightFormat::mxfp4);
  const std::int64_t E = f.experts, H = f.hidden, I = f.intermediate;
  const auto sz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  Fp4Experts out;
  out.format = WeightFormat::mxfp4;
  out.num_experts = E;
  out.hidden = H;
  out.intermediate = I;
  out.w13_packed.resize(sz(E * 2 * I * (H / 2)));
  out.w13_scales.resize(sz(E * 2 * I * (H / 32)));
  // Row 2j of an expert's gate_up is its gate row j, row 2j + 1 its up row j: to rows j and I + j.
  const auto deinterleave = [&](const std::uint8_t* in, std::uint8_t* to, std::int64_t row_bytes) {
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t r = 0; r < 2 * I; ++r) {
        const std::int64_t dst = e * 2 * I + (r % 2) * I + r / 2;
        std::memcpy(to + sz(dst * row_bytes), in + sz((e * 2 * I + r) * row_bytes), sz(row_bytes));
      }
  };
  deinterleave(f.gate_up_blocks.bytes().data(), out.w13_packed.data(), H / 2);
  deinterleave(f.gate_up_scales.bytes().data(), out.w13_scales.data(), H / 32);
  const Span<const std::uint8_t> down = f.down_blocks.bytes(), down_scales = f.down_scales.bytes();
  out.w2_packed.assign(down.begin(), down.end());
  out.w2_scales.assign(down_scales.begin(), down_scales.end());
  // MXFP4 has no global scales; W4A16 reads no activation scales (1 in both directions, as
  // stack_experts gives MXFP4 experts).
  out.w13_global_scale.assign(sz(2 * E), 1.0f);
  out.w2_global_scale.assign(sz(E), 1.0f);
  out.w13_input_global_scale.assign(sz(E), 1.0f);
  out.w2_input_global_scale.assign(sz(E), 1.0f);
  out.w13_input_scale.assign(sz(E), 1.0f);
  out.w2_input_scale.assign(sz(E), 1.0f);
  if (f.gate_up_bias) {
    const std::string owner = fmt::format("gpt-oss MoE layer '{}'", f.layer);
    const std::vector<float> gate_up = bias_values(*f.gate_up_bias, owner);
    out.w13_bias.resize(gate_up.size());
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t r = 0; r < 2 * I; ++r) out.w13_bias[sz(e * 2 * I + (r % 2) * I + r / 2)] = gate_up[sz(e * 2 * I + r)];
    out.w2_bias = bias_values(*f.down_bias, owner);
  }
  return out;
}

}  // namespace fp4cl::detail
