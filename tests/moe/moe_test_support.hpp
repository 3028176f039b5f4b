// Test data and device runs for the MoE tests.
//
// Data comes in two flavours:
//   - "exact": BF16 activations on the grid k/8 in [-2, 2] with a ±2 in every 16-block, block
//     scales with few significant bits over a narrow range, power-of-two global scales (gate,
//     up and down different per expert). FC1 then has an exact fp32 evaluation, so the reference's bound stays within a
//     few BF16 ulps (see host/reference/moe_reference.hpp);
//   - "generic": Gaussian activations, block scales over the whole range, arbitrary global
//     scales — the bound is looser there, and still rigorous.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/moe.hpp"
#include "fp4cl/weights.hpp"
#include "reference/moe_reference.hpp"
#include "support/log_capture.hpp"

namespace fp4cl {
// gtest prints parameters through PrintTo found by argument-dependent lookup.
inline void PrintTo(const QuantScheme& s, std::ostream* os) { *os << s.name(); }
}  // namespace fp4cl

namespace fp4cl::test {

enum class Data { exact, generic };

struct ExpertSpec {
  WeightFormat format = WeightFormat::nvfp4;
  std::int64_t experts = 8, hidden = 64, intermediate = 64;
  Data data = Data::exact;
  std::uint64_t seed = 1;
};

Fp4Experts make_experts(const ExpertSpec& spec);

// x [T, H] BF16 bits.
std::vector<std::uint16_t> make_activations(std::int64_t tokens, std::int64_t hidden, Data data, std::uint64_t seed);

// [T, k] ids: each row k distinct experts drawn from [0, num_experts).
std::vector<std::int32_t> make_ids(std::int64_t tokens, int top_k, std::int64_t num_experts, std::uint64_t seed);
// [T, k] positive weights.
std::vector<float> make_weights(std::int64_t tokens, int top_k, std::uint64_t seed);
// [T, E] router logits.
std::vector<float> make_logits(std::int64_t tokens, std::int64_t num_experts, std::uint64_t seed);

// The context every test of the process shares.
Context& test_context();

// What the device returned: the output as BF16 bits or fp32 values.
struct DeviceResult {
  std::vector<std::uint16_t> bf16;
  std::vector<float> fp32;
  MoeStats stats;
  MoeCall call;
};

DeviceResult run_topk(MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
                      const std::vector<std::int32_t>& ids, const std::vector<float>& weights, std::int64_t tokens);
DeviceResult run_logits(MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
                        const std::vector<float>& logits, std::int64_t tokens);

// Every output element within the reference's bound; reports the first mismatches.
::testing::AssertionResult matches_reference(const reference::MoeReferenceResult& ref, const DeviceResult& dev,
                                             MoeOutput output);

reference::MoeReferenceOptions reference_options(const MoeConfig& config);

// Runs `layer` (made from `experts` with `config`) on `tokens` tokens: Data::exact activations
// from `seed`, top-k ids over the experts from seed + 1 and their weights from seed + 2. Success
// when every output is within the reference's bound and a second run gives the same bits.
::testing::AssertionResult topk_matches_reference_twice(MoeLayer& layer, const Fp4Experts& experts,
                                                        const MoeConfig& config, std::int64_t tokens,
                                                        std::uint64_t seed);

// The median over the nonzero outputs of bound / ulp_bf16(|value|): how many BF16 ulps the
// tolerance allows (0 when there are no nonzero outputs).
double median_bound_ulps(const reference::MoeReferenceResult& ref);

// Whether the program cache's debug log, captured by `log`, built kernel file `file` with an option
// containing `option` (the "program FILE with OPTIONS" line of each request).
bool built_with(const LogCapture& log, const std::string& file, const std::string& option);
// Whether one program of `file` was built with every option of `options`, each a whole option
// (followed by a space in the line's sorted options).
bool built_with_all(const LogCapture& log, const std::string& file, const std::vector<std::string>& options);

}  // namespace fp4cl::test
