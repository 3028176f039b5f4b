// Shared data of the checkpoint → layer tests: one small synthetic Qwen3-MoE source model,
// quantized once per (layout, scheme, activation amax) by the library's quantizer (what `fp4cl
// quantize` runs), and helpers that run layers on host data and compare them with the scalar
// references.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "fp4cl/checkpoint.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/model_writer.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/safetensors.hpp"
#include "reference/moe_reference.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl {
inline void PrintTo(const QuantScheme& s, std::ostream* os) { *os << s.name(); }
}  // namespace fp4cl

namespace fp4cl::test {

// H = 64, I = 32, E = 4, k = 2, one layer; q_proj [64, 64]: every in_features a multiple of 32.
SyntheticModelOptions source_model_options();

// The BF16 source model (written on first use, removed at exit).
const std::filesystem::path& source_model();

struct Variant {
  QuantProducer layout = QuantProducer::compressed_tensors;
  QuantScheme scheme;
  std::optional<float> input_amax;  // fixed activation amax, or calibrated when absent
};

// The source model quantized as `variant` (written on first use, removed at exit).
const std::filesystem::path& quantized_model(const Variant& variant);

// Every (layout, scheme) the quantizer writes: ModelOpt NVFP4 W4A4 / W4A16, compressed-tensors
// all four.
std::vector<Variant> every_layout_and_scheme();
std::string variant_name(const Variant& v);

// Copies `from` (a single-file checkpoint: its .json files and model.safetensors) to `to`, where
// `add` may add tensors to the new model.safetensors (it gets the writer and the source file).
void copy_checkpoint(const std::filesystem::path& from, const std::filesystem::path& to,
                     const std::function<void(SafetensorsWriter&, const SafetensorsFile&)>& add);

// Copies `from` (a single-file checkpoint) to `to`, adding F32 tensors to its model.safetensors.
void copy_with_extra_tensors(const std::filesystem::path& from, const std::filesystem::path& to,
                             const std::map<std::string, float>& extra, bool scalar_shape);

// Writes to `to` a copy of the NVFP4 W4A4 compressed-tensors checkpoint (4 experts, top-2) made a
// DeepSeek-V3-style model: config.json's sigmoid gate with 2 groups of 2, 1 kept, × 2.5
// (topk_method noaux_tc), and, unless `bias` is null, the gate's e_score_correction_bias of
// dtype `dtype` (F32 or BF16) and shape `shape`. Returns `to`.
std::filesystem::path deepseek_checkpoint(const std::filesystem::path& to, const std::vector<float>* bias,
                                          Dtype dtype = Dtype::f32, std::vector<std::int64_t> shape = {4});

// Writes to `to` a copy of the single-file checkpoint `from` whose MoE layer 0 also has a shared
// expert "model.layers.0.mlp.shared_experts.<projection>.<suffix>": expert 1's tensors again, or
// with `parts` > 1 an MLP of `parts` times its intermediate size (n_shared_experts = parts) whose
// part j is expert 1 with its rows in reverse order for odd j. Returns `to`.
std::filesystem::path with_shared_expert(const std::filesystem::path& from, const std::filesystem::path& to,
                                         int parts = 1);

// Deterministic N(0, 1) BF16 activations [rows, cols] and router logits [rows, cols].
std::vector<std::uint16_t> gaussian_bf16(std::int64_t rows, std::int64_t cols, std::uint32_t seed);
std::vector<float> gaussian_logits(std::int64_t rows, std::int64_t cols, std::uint32_t seed);

// Runs an MoE layer on host data from router logits; the output as fp32 values of the layer's
// output type (BF16 widened exactly), and as raw bits for bit-identity checks.
struct MoeRun {
  std::vector<float> values;
  std::vector<std::uint32_t> bits;  // BF16 or fp32 bits, one per output
};
MoeRun run_moe_logits(MoeLayer& layer, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                      const std::vector<float>& logits, std::int64_t tokens);

// How many outputs lie outside the reference's bound (reporting the first few as failures).
std::size_t moe_outside_bound(const reference::MoeReferenceResult& ref, const MoeRun& run, MoeOutput output,
                              const std::string& what);
std::size_t linear_outside_bound(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                 std::int64_t m, const std::vector<float>& y, bool bf16_output,
                                 const std::string& what);

// The Linear layer's output as fp32 values (BF16 widened exactly).
std::vector<float> run_linear(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t m);

}  // namespace fp4cl::test
