// Random layers and inputs for benchmarks (deterministic per seed): FP4 codes uniform over all 16
// values, block scales over a few octaves, global scales that keep outputs near unit size,
// Gaussian BF16 activations, and routings of k distinct experts per token.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4cl/weights.hpp"

namespace fp4cl::bench {

Fp4Weight make_linear_weight(WeightFormat format, std::int64_t n, std::int64_t k, std::uint64_t seed);

// One expert's weights, repeated over `experts` with different seeds.
Fp4Experts make_experts(WeightFormat format, std::int64_t hidden, std::int64_t intermediate, std::int64_t experts,
                        std::uint64_t seed);

// Adds biases (gpt-oss's layers have them) to `experts`: uniform in [-1, 1], about the size of
// the synthetic sums.
void add_expert_biases(Fp4Experts& experts, std::uint64_t seed);

// BF16 bits [rows, cols], standard normal.
std::vector<std::uint16_t> make_activations(std::int64_t rows, std::int64_t cols, std::uint64_t seed);

struct Routing {
  std::vector<std::int32_t> ids;  // [T, k], distinct within a row
  std::vector<float> weights;     // [T, k], positive, each row sums to about 1
};
Routing make_routing(std::int64_t tokens, int top_k, std::int64_t experts, std::uint64_t seed);

// [T, E] router logits, N(0, 2) (seeded).
std::vector<float> make_logits(std::int64_t tokens, std::int64_t experts, std::uint64_t seed);

// The number of distinct experts a routing sends tokens to.
std::int64_t distinct_experts(const Routing& r);

}  // namespace fp4cl::bench
