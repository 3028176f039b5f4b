// The GPU GEMV on the split layout (strategy "gemv_split", kernels/linear_gemv_split.cl), forced on
// the test device: against the scalar reference with bias, odd N and BF16/FP32 outputs for every
// scheme at M = 1, 3, 8; its tuning variants (lanes, rows per lane group, token groups, staging
// in several chunks); bit-identical repeats and batch invariance; its selection (GPUs, decode
// only) and its refusals of bad parameters. (The strategy × shape grid of linear_kernels_test
// covers it too.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"
#include "linear/linear_check.hpp"
#include "linear/forced_kernel_run.hpp"
#include "linear/linear_test_support.hpp"
#include "prepare/fp4_split_layout.hpp"
#include "support/scoped_env.hpp"
#include "support/stacked_rows.hpp"

namespace fp4cl {
namespace {

Context& context() { return test::context(); }

// The forced gemv_split kernel, every output checked against the reference (forced_kernel_run.hpp).
std::vector<std::uint32_t> run_checked(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                       std::int64_t m, const std::vector<float>& bias, OutputType output,
                                       const std::map<std::string, long long>& tuning, const std::string& what) {
  return test::run_forced_checked("gemv_split", scheme, w, x, m, bias, output, tuning, what);
}

std::string label(const QuantScheme& s) { return std::string(s.name()); }

const std::vector<QuantScheme>& all_schemes() { return test::all_linear_schemes(); }

// Odd N (a partial last row tile), bias, both output types, M = 1, 3, 8, every scheme.
TEST(LinearGemvSplit, MatchesReferenceWithBiasOddNBothOutputs) {
  for (const QuantScheme& scheme : all_schemes()) {
    const std::int64_t n = 37, k = 512;
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 11);
    const std::vector<float> bias = test::random_bias(n, 12);
    for (std::int64_t m : {1, 3, 8}) {
      const std::vector<std::uint16_t> x = test::random_activations(m, k, static_cast<std::uint32_t>(13 + m));
      for (OutputType out : {OutputType::bf16, OutputType::fp32})
        run_checked(scheme, w, x, m, bias, out, {},
                    label(scheme) + " m=" + std::to_string(m) + " " + to_string(out));
    }
  }
}

// Tuning variants: 32 lanes with 2 rows per lane group; an NVFP4 W4A4 k that is 16 past a
// multiple of 32 (the layout's zero padding, a zero activation block); 4 lanes with token groups
// of 2 (several work-groups along the tokens); staging of one step at a time (many chunks).
TEST(LinearGemvSplit, TuningVariantsMatchReference) {
  struct Variant {
    std::int64_t n, k, m;
    std::map<std::string, long long> tuning;
  };
  // One scheme each (every program build costs seconds on PoCL): variant i runs all_schemes()[i].
  const std::vector<Variant> variants = {
      {129, 2048, 3, {{"SPLIT_LANES", 32}, {"SPLIT_LOCAL", 64}, {"SPLIT_RPG", 2}, {"SPLIT_TOKENS", 4}}},
      {21, 1040, 2, {{"SPLIT_LANES", 16}, {"SPLIT_LOCAL", 32}, {"SPLIT_TOKENS", 2}, {"SPLIT_STAGE", 2 * 32 * 16}}},
      {70, 1024, 8, {{"SPLIT_LANES", 4}, {"SPLIT_LOCAL", 16}, {"SPLIT_TOKENS", 2}}},
      {33, 1024, 5, {{"SPLIT_LANES", 8}, {"SPLIT_LOCAL", 32}, {"SPLIT_TOKENS", 8}, {"SPLIT_STAGE", 8 * 32 * 8}}},
  };
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    const QuantScheme& scheme = all_schemes()[i];
    const Fp4Weight w = test::random_weight(scheme.weight, v.n, v.k, static_cast<std::uint32_t>(v.n + v.k));
    const std::vector<std::uint16_t> x = test::random_activations(v.m, v.k, static_cast<std::uint32_t>(v.m * 3 + v.k));
    run_checked(scheme, w, x, v.m, test::random_bias(v.n, 5), OutputType::fp32, v.tuning,
                label(scheme) + " n=" + std::to_string(v.n) + " k=" + std::to_string(v.k));
  }
}

// The same call twice gives the same bits; a token's outputs do not depend on the other tokens of
// its call (one token alone, or the third of eight, in one work-group or split over groups of 2),
// nor, under W4A4, on where its activations were quantized (the pre-pass from 2 tokens on by
// default, or the kernel).
TEST(LinearGemvSplit, DeterministicAndBatchInvariant) {
  for (const QuantScheme& scheme : all_schemes()) {
    const std::int64_t n = 45, k = 768, m = 8;
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 21);
    const std::vector<std::uint16_t> x = test::random_activations(m, k, 22);
    const std::vector<float> bias = test::random_bias(n, 23);
    const auto first = run_checked(scheme, w, x, m, bias, OutputType::fp32, {}, label(scheme) + " first");
    const auto again = run_checked(scheme, w, x, m, bias, OutputType::fp32, {}, label(scheme) + " again");
    EXPECT_EQ(first, again) << label(scheme);
    const auto pairs = run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"SPLIT_TOKENS", 2}}, label(scheme) + " pairs");
    EXPECT_EQ(first, pairs) << label(scheme);
    // W4A4: the activations quantized inside the kernel (never the pre-pass) give the same bits.
    const auto in_kernel = run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"SPLIT_PREPASS_TOKENS", 0}},
                                       label(scheme) + " quantized in the kernel");
    EXPECT_EQ(first, in_kernel) << label(scheme);
    const std::vector<std::uint16_t> third(x.begin() + 2 * k, x.begin() + 3 * k);
    const auto alone = run_checked(scheme, w, third, 1, bias, OutputType::fp32, {}, label(scheme) + " alone");
    EXPECT_EQ(alone, std::vector<std::uint32_t>(first.begin() + 2 * n, first.begin() + 3 * n)) << label(scheme);
  }
}

// MXFP4 blocks without a nonzero code may carry any scale byte (here 2^-127 and 2^127, far outside
// the range of the others): the layout gives them the largest scale and the results stay exact.
TEST(LinearGemvSplit, Mxfp4AllZeroBlocksWithExtremeScales) {
  const QuantScheme scheme{WeightFormat::mxfp4, Activations::bf16};
  const std::int64_t n = 8, k = 256;
  Fp4Weight w = test::random_weight(scheme.weight, n, k, 31);
  for (std::int64_t r = 0; r < n; r += 3) {
    const std::int64_t b = r % (k / 32);
    std::fill_n(w.packed.begin() + r * k / 2 + b * 16, 16, std::uint8_t{0x88});  // -0 codes
    w.scales[static_cast<std::size_t>(r * (k / 32) + b)] = r % 2 ? 254 : 0;
  }
  const std::vector<std::uint16_t> x = test::random_activations(2, k, 32);
  run_checked(scheme, w, x, 2, {}, OutputType::fp32, {}, "MXFP4 zero blocks");
  const Fp4SplitWeight split = make_fp4_split_weight(w, 8, -126);
  int hi = 0;  // the largest scale byte of a block with a nonzero code
  for (std::int64_t b = 0; b < n * k / 32; ++b) {
    bool zero = true;
    for (std::int64_t i = 0; i < 16; ++i) zero = zero && (w.packed[static_cast<std::size_t>(b * 16 + i)] & 0x77) == 0;
    if (!zero) hi = std::max<int>(hi, w.scales[static_cast<std::size_t>(b)]);
  }
  EXPECT_EQ(split.scale_exp, std::min(126, 254 - hi));
  for (std::uint8_t b : split.layout.scales) {
    EXPECT_NE(b, 0);
    EXPECT_NE(b, 254);
  }
}

// Automatic selection: decode on GPUs only; the CPU test device never picks it unforced.
TEST(LinearGemvSplit, DesignedForGpuDecode) {
  const auto k = linear_kernels().instantiate("gemv_split");
  EXPECT_TRUE(k->designed_for(LinearRegime::decode, DeviceKind::gpu));
  EXPECT_FALSE(k->designed_for(LinearRegime::prefill, DeviceKind::gpu));
  const Verdict cpu = k->designed_for(LinearRegime::decode, DeviceKind::cpu);
  EXPECT_FALSE(cpu);
  EXPECT_NE(cpu.reason().find("GPU"), std::string::npos) << cpu.reason();
  if (context().info().kind != DeviceKind::gpu) {
    const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 256, 41);
    LinearOptions options;
    options.max_tokens = 8;
    Linear layer = Linear::create(context(), w, {WeightFormat::nvfp4, Activations::bf16}, options);
    EXPECT_NE(layer.kernel_name(1), "gemv_split");
  }
}

// Bad tuning parameters are errors that name the parameter and the expectation.
TEST(LinearGemvSplit, BadParametersAreRefusedByName) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 256, 51);
  const std::vector<std::pair<std::map<std::string, long long>, std::string>> cases = {
      {{{"SPLIT_LANES", 3}}, "SPLIT_LANES = 3 is not a power of two"},
      {{{"SPLIT_LANES", 64}}, "SPLIT_LANES = 64"},
      {{{"SPLIT_LOCAL", 20}}, "SPLIT_LOCAL = 20 is not a multiple of SPLIT_LANES"},
      {{{"SPLIT_RPG", 0}}, "SPLIT_RPG = 0 is outside 1..8"},
      {{{"SPLIT_TOKENS", 3}}, "SPLIT_TOKENS = 3 is not 1, 2, 4, 8 or 16"},
      {{{"SPLIT_STAGE", 100}}, "SPLIT_STAGE = 100 floats: must hold one step"},
      {{{"SPLIT_PREPASS_TOKENS", -1}}, "SPLIT_PREPASS_TOKENS = -1 is negative"},
  };
  for (const auto& [tuning, message] : cases) {
    LinearOptions options;
    options.kernel = "gemv_split";
    options.max_tokens = 4;
    options.tuning = tuning;
    try {
      Linear::create(context(), w, {WeightFormat::nvfp4, Activations::bf16}, options);
      ADD_FAILURE() << "accepted " << tuning.begin()->first << " = " << tuning.begin()->second;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("gemv_split"), std::string::npos) << e.what();
    }
  }
}

// The split layout of one row: lane l of step s holds elements s·32L + 4L·q + 4l + c as nibble
// 4·(q % 2) + c of word q / 2, and the scale groups hold the blocks of 4L·q + g·block.
TEST(LinearGemvSplit, LayoutPlacesElementsAsTheKernelReadsThem) {
  const std::int64_t K = 256, L = 4, block = 16;
  std::vector<std::uint8_t> packed(K / 2), scales(K / block);
  for (std::int64_t e = 0; e < K; ++e) packed[e / 2] |= static_cast<std::uint8_t>((e * 7 % 16) << (4 * (e % 2)));
  for (std::int64_t b = 0; b < K / block; ++b) scales[b] = static_cast<std::uint8_t>(b + 1);
  const SplitLayout s = split_layout(packed, scales, 1, 1, K, block, L);
  ASSERT_EQ(s.words.size(), static_cast<std::size_t>(K / 8));
  for (std::int64_t st = 0; st < K / (32 * L); ++st)
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t q = 0; q < 8; ++q)
        for (std::int64_t c = 0; c < 4; ++c) {
          const std::int64_t e = st * 32 * L + 4 * L * q + 4 * l + c;
          const std::uint32_t word = s.words[static_cast<std::size_t>((st * L + l) * 4 + q / 2)];
          EXPECT_EQ((word >> (4 * (4 * (q % 2) + c))) & 15u, static_cast<std::uint32_t>(e * 7 % 16)) << e;
        }
  const std::int64_t G = 4 * L / block;  // 1
  for (std::int64_t st = 0; st < K / (32 * L); ++st)
    for (std::int64_t q = 0; q < 8; ++q)
      EXPECT_EQ(s.scales[static_cast<std::size_t>(st * G * 8 + q)], (st * 32 * L + 4 * L * q) / block + 1);
}

// Rows of an [E, stride, K] stack read in place (FC1's gate or up half of every expert) give the
// split layout of those rows copied out first; the layout's rows split over threads
// (FP4CL_HOST_THREADS) give the bits of one thread.
TEST(LinearGemvSplit, LayoutOfRowsReadInPlaceAndOnThreadsMatchesOneThreadsOfACopy) {
  const std::int64_t E = 12, I = 256, K = 2048, block = 16;  // 3 MiB of codes a half: 3 ranges of 1024 rows
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(E * 2 * I * K / 2)),
      scales(static_cast<std::size_t>(E * 2 * I * K / block));
  std::uint32_t x = 12345u;
  for (auto& b : packed) b = static_cast<std::uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (auto& b : scales) b = static_cast<std::uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (std::int64_t first : {std::int64_t{0}, I}) {
    const test::StackedRows half = test::copy_stacked_rows(packed, scales, E, 2 * I, first, I, K, block);
    SplitLayout copied, in_place;
    {
      const test::ScopedEnv env("FP4CL_HOST_THREADS", "1");
      copied = split_layout(half.packed, half.scales, E, I, K, block);
    }
    {
      const test::ScopedEnv env("FP4CL_HOST_THREADS", "3");
      in_place = split_layout(packed, scales, E, I, K, block, 0, {I, 2 * I, first});
    }
    EXPECT_EQ(in_place.words, copied.words) << "first " << first;
    EXPECT_EQ(in_place.scales, copied.scales) << "first " << first;
  }
  try {
    split_layout(packed, scales, E, I, K, block, 0, {I, 2 * I, I + 1});
    ADD_FAILURE() << "source rows past each matrix accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("source rows 257 .. 512 of every 512 do not tile its rows"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(split_layout(packed, scales, E, I, K, block, 0, {2 * I, 2 * I, 0}), Error);  // rows != N
  EXPECT_THROW(split_layout(packed, scales, E, I, K, block), Error);  // [E, I, K] is half of what is given
}

}  // namespace
}  // namespace fp4cl
