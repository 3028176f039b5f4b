// The tensor-core linear kernel (strategy "mma", kernels/linear_mma.cl), forced on the test
// device (on PoCL its MMA is emulated: FP4_MMA_PTX=0): against the scalar reference for every
// scheme at M = 1, 3, 8, 9, 17, 64 (token tiles of 8, 16 and 32, several tiles), with bias and
// both output types; its tuning variants (K split over warps, several row tiles a work-group, the
// unrolled K loop with a remainder); W4A4 quantized in the kernel or by the pre-pass; MXFP4 scales
// that move the decode's exponent; bit-identical repeats and batch invariance; refusals of shapes
// off the MMA layout's tiles and of bad parameters; its selection (only where the MMA is native);
// the emulation's summation order, computed without OpenCL.
// Shapes stay small: the emulation is slow (each lane remakes its quad's and its columns' fragments).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"
#include "kernels/moe_registry.hpp"  // mma_native
#include "linear/linear_check.hpp"
#include "linear/forced_kernel_run.hpp"
#include "linear/linear_test_support.hpp"
#include "prepare/fp4_mma_layout.hpp"
#include "reference/linear_reference.hpp"

namespace fp4cl {
namespace {

// The forced mma kernel, every output checked against the reference (forced_kernel_run.hpp).
std::vector<std::uint32_t> run_checked(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                       std::int64_t m, const std::vector<float>& bias, OutputType output,
                                       const std::map<std::string, long long>& tuning, const std::string& what) {
  return test::run_forced_checked("mma", scheme, w, x, m, bias, output, tuning, what);
}

std::string label(const QuantScheme& s) { return std::string(s.name()); }

const std::vector<QuantScheme>& all_schemes() { return test::all_linear_schemes(); }

// Every scheme (NVFP4 W4A4 with its global scales: the weight's and the activations' quant and
// dequant directions, test::random_weight), M from one token to several token tiles, bias, both
// output types.
TEST(LinearMma, MatchesReferenceEverySchemeAndTokenCount) {
  for (const QuantScheme& scheme : all_schemes()) {
    const std::int64_t n = 64, k = 192;
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 11);
    const std::vector<float> bias = test::random_bias(n, 12);
    for (std::int64_t m : {1, 3, 8, 9, 17, 64}) {
      const std::vector<std::uint16_t> x = test::random_activations(m, k, static_cast<std::uint32_t>(13 + m));
      const OutputType out = m % 2 ? OutputType::bf16 : OutputType::fp32;
      run_checked(scheme, w, x, m, m == 9 ? std::vector<float>{} : bias, out, {},
                  label(scheme) + " m=" + std::to_string(m) + " " + to_string(out));
    }
  }
}

// Tuning variants, one scheme each (every program build costs seconds on PoCL): K split over 4
// warps with the unrolled loop and its remainder (3 chunks a warp, 2 ahead); 2 row tiles a
// work-group with K split over 2 warps and token tiles of 16; the K split from the shape (9 chunks:
// an odd count) with tiles of 8 tokens; 4 row tiles, 5 chunks over 5 warps; 2 row tiles a warp
// (one B fragment for both) with 3 warps along the rows; MMA_MT 4 where 4 does not divide the
// row tiles. MMA_NT is the token tile the call takes (the smallest of 8, 16, 32 holding its
// tokens, or the largest): the layer builds one program per tile up to MMA_NT, each seconds on
// PoCL, so no variant builds larger tiles it does not run.
TEST(LinearMma, TuningVariantsMatchReference) {
  struct Variant {
    std::int64_t n, k, m;
    std::map<std::string, long long> tuning;
  };
  const std::vector<Variant> variants = {
      {32, 768, 5, {{"MMA_KSPLIT", 4}, {"MMA_UNROLL", 2}, {"MMA_NT", 1}}},
      {96, 256, 21, {{"MMA_RT", 2}, {"MMA_KSPLIT", 2}, {"MMA_NT", 2}}},
      {48, 576, 3, {{"MMA_NT", 1}}},
      {128, 320, 10, {{"MMA_RT", 4}, {"MMA_KSPLIT", 5}, {"MMA_UNROLL", 3}, {"MMA_NT", 2}}},
      {96, 384, 19, {{"MMA_MT", 2}, {"MMA_RT", 3}, {"MMA_KSPLIT", 2}, {"MMA_UNROLL", 2}}},
      {80, 192, 2, {{"MMA_MT", 4}, {"MMA_NT", 1}}},  // 5 row tiles: MMA_MT 1 (the largest divisor)
  };
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    const QuantScheme& scheme = all_schemes()[i % all_schemes().size()];
    const Fp4Weight w = test::random_weight(scheme.weight, v.n, v.k, static_cast<std::uint32_t>(v.n + v.k));
    const std::vector<std::uint16_t> x = test::random_activations(v.m, v.k, static_cast<std::uint32_t>(v.m * 3 + v.k));
    run_checked(scheme, w, x, v.m, test::random_bias(v.n, 5), OutputType::fp32, v.tuning,
                label(scheme) + " n=" + std::to_string(v.n) + " k=" + std::to_string(v.k));
  }
}

// MXFP4 scales reaching far above 2^1 move the decode's exponent (scale_exp < 126: the epilogue
// multiplies by 2^(126 - scale_exp)); all-zero blocks with extreme scale bytes do not count.
TEST(LinearMma, Mxfp4ScaleExponentFollowsTheScales) {
  for (const Activations a : {Activations::bf16, Activations::fp4_dynamic}) {
    const QuantScheme scheme{WeightFormat::mxfp4, a};
    const std::int64_t n = 32, k = 256;
    Fp4Weight w = test::random_weight(scheme.weight, n, k, 61);
    std::mt19937 rng(62);
    std::uniform_int_distribution<int> e(100, 160);
    for (auto& s : w.scales) s = static_cast<std::uint8_t>(e(rng));
    w.scales[3] = 167;
    for (std::int64_t r = 1; r < n; r += 5) {
      const std::int64_t b = r % (k / 32);
      std::fill_n(w.packed.begin() + r * k / 2 + b * 16, 16, std::uint8_t{0x88});  // -0 codes
      w.scales[static_cast<std::size_t>(r * (k / 32) + b)] = r % 2 ? 254 : 0;
    }
    const Fp4MmaWeight mma = make_fp4_mma_weight(w);
    EXPECT_EQ(mma.scale_exp, 254 - 167);
    const std::vector<std::uint16_t> x = test::random_activations(4, k, 63);
    run_checked(scheme, w, x, 4, {}, OutputType::fp32, {}, label(scheme) + " wide scales");
  }
  // Scales up to 2^1: the decode is the identity (scale_exp 126).
  Fp4Weight small = test::random_weight(WeightFormat::mxfp4, 16, 64, 64);
  for (auto& s : small.scales) s = static_cast<std::uint8_t>(std::min<int>(s, 128));
  EXPECT_EQ(make_fp4_mma_weight(small).scale_exp, 126);
}

// Where the MMA is emulated (PoCL) its bits follow one order, which this test computes without
// OpenCL: each output's fp32 sum is one FMA chain (products exact in fp32) over the chunks of 64
// of K in order, in a chunk over MMA j = 0..3 and its k = 0..15, which the layout's k map puts at
// K position 64c + 16·((k % 8) / 2) + 4j + 2·(k / 8) + k % 2; then × the weight's global scale.
// A rewrite of the emulation that sums in another order fails here (summing each chunk backwards
// changes W4A16's bits; W4A4's exact products do not show the order). Tensor cores add in their
// own way: skipped there.
TEST(LinearMma, EmulationSumsInTheMmaOrder) {
  if (mma_native(test::context().info())) GTEST_SKIP() << "the MMA runs on tensor cores here";
  const std::int64_t n = 32, k = 256;
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const QuantScheme scheme{format, Activations::bf16};
    const Fp4Weight w = test::random_weight(format, n, k, 71);
    const double gs = format == WeightFormat::nvfp4 ? static_cast<double>(w.global_scale) : 1.0;
    for (const std::int64_t m : {1, 3}) {
      const std::vector<std::uint16_t> x = test::random_activations(m, k, static_cast<std::uint32_t>(72 + m));
      const std::vector<std::uint32_t> bits =
          run_checked(scheme, w, x, m, {}, OutputType::fp32, {{"MMA_KSPLIT", 1}}, label(scheme) + " in the MMA order");
      int differ = 0;
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t row = 0; row < n; ++row) {
          float acc = 0.0f;
          for (std::int64_t c = 0; c < k / 64; ++c)
            for (int j = 0; j < 4; ++j)
              for (int kk = 0; kk < 16; ++kk) {
                const std::int64_t pos = 64 * c + 16 * ((kk % 8) / 2) + 4 * j + 2 * (kk / 8) + kk % 2;
                // e2m1 × block scale (exact in float: at most 6 significant bits in range).
                const auto wv = static_cast<float>(reference::weight_value(w, row, pos) / gs);
                acc = std::fma(wv, test::bf16_value(x[static_cast<std::size_t>(t * k + pos)]), acc);
              }
          const float expected = static_cast<float>(static_cast<double>(acc) * gs);
          std::uint32_t e = 0;
          std::memcpy(&e, &expected, sizeof e);
          if (bits[static_cast<std::size_t>(t * n + row)] != e && ++differ <= 3)
            ADD_FAILURE() << label(scheme) << " m=" << m << " token " << t << " row " << row << ": 0x" << std::hex
                          << bits[static_cast<std::size_t>(t * n + row)] << " against 0x" << e;
        }
      EXPECT_EQ(differ, 0) << label(scheme) << " m=" << m;
    }
  }
}

// The same call twice gives the same bits; a token's outputs do not depend on the other tokens of
// its call nor on the token tile (one token alone in a tile of 8, or the third of 17 in a tile of
// 32, or in tiles of 8 or 16) nor on the row tiles a warp multiplies.
TEST(LinearMma, DeterministicAndBatchInvariant) {
  for (const QuantScheme& scheme : all_schemes()) {
    const std::int64_t n = 48, k = 384, m = 17;
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 21);
    const std::vector<std::uint16_t> x = test::random_activations(m, k, 22);
    const std::vector<float> bias = test::random_bias(n, 23);
    const auto first = run_checked(scheme, w, x, m, bias, OutputType::fp32, {}, label(scheme) + " first");
    const auto again = run_checked(scheme, w, x, m, bias, OutputType::fp32, {}, label(scheme) + " again");
    EXPECT_EQ(first, again) << label(scheme);
    const auto eights = run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"MMA_NT", 1}}, label(scheme) + " 8s");
    EXPECT_EQ(first, eights) << label(scheme);
    const auto pairs = run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"MMA_MT", 3}, {"MMA_NT", 2}},
                                   label(scheme) + " 3 row tiles a warp");
    EXPECT_EQ(first, pairs) << label(scheme);
    const std::vector<std::uint16_t> third(x.begin() + 2 * k, x.begin() + 3 * k);
    const auto alone = run_checked(scheme, w, third, 1, bias, OutputType::fp32, {}, label(scheme) + " alone");
    EXPECT_EQ(alone, std::vector<std::uint32_t>(first.begin() + 2 * n, first.begin() + 3 * n)) << label(scheme);
  }
}

// W4A4 activations quantized inside the kernel (calls of up to MMA_QUANT_TOKENS tokens; by default
// one) or by the pre-pass: the same values, the same bits.
TEST(LinearMma, W4A4QuantizedInTheKernelOrByThePrePassAlike) {
  for (const WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const QuantScheme scheme{f, Activations::fp4_dynamic};
    const std::int64_t n = 32, k = 320;
    const Fp4Weight w = test::random_weight(f, n, k, 71);
    const std::vector<float> bias = test::random_bias(n, 72);
    for (std::int64_t m : {1, 3, 8}) {
      const std::vector<std::uint16_t> x = test::random_activations(m, k, static_cast<std::uint32_t>(73 + m));
      const std::string what = label(scheme) + " m=" + std::to_string(m);
      const auto here =
          run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"MMA_QUANT_TOKENS", 8}}, what + " in the kernel");
      const auto pass =
          run_checked(scheme, w, x, m, bias, OutputType::fp32, {{"MMA_QUANT_TOKENS", 0}}, what + " by the pre-pass");
      EXPECT_EQ(here, pass) << what;
    }
  }
}

// Shapes off the MMA layout's tiles are refused with the reason (forced: an error naming the
// kernel and the layer); so are bad tuning parameters.
TEST(LinearMma, BadShapesAndParametersAreRefusedByName) {
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::bf16};
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::map<std::string, long long>, std::string>> cases = {
      {40, 256, {}, "n = 40 is not a multiple of 16"},
      {64, 96, {}, "k = 96 is not a multiple of 64"},
      {64, 1040, {}, "k = 1040 is not a multiple of 64"},
      {64, 256, {{"MMA_NT", 3}}, "MMA_NT = 3 is not 1, 2, 4 or 8"},
      {64, 256, {{"MMA_RT", 0}}, "MMA_RT = 0 is outside 1..8"},
      {64, 256, {{"MMA_MT", 5}}, "MMA_MT = 5 is outside 1..4"},
      {64, 256, {{"MMA_KSPLIT", 3}}, "MMA_KSPLIT = 3 does not divide the k / 64 = 4 chunks"},
      {64, 256, {{"MMA_KSPLIT", -1}}, "MMA_KSPLIT = -1 is outside 0..32"},
      {64, 256, {{"MMA_UNROLL", 9}}, "MMA_UNROLL = 9 is outside 1..8"},
      {64, 256, {{"MMA_QUANT_TOKENS", 9}}, "MMA_QUANT_TOKENS = 9 is outside 0..8"},
  };
  for (const auto& [n, k, tuning, message] : cases) {
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 51);
    LinearOptions options;
    options.kernel = "mma";
    options.max_tokens = 4;
    options.tuning = tuning;
    try {
      Linear::create(test::context(), w, scheme, options);
      ADD_FAILURE() << "accepted n = " << n << ", k = " << k;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'mma'"), std::string::npos) << e.what();
    }
  }
  // The layout itself refuses them too, naming the weight's shape.
  for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{40, 256}, {64, 96}}) {
    const Fp4Weight w = test::random_weight(WeightFormat::mxfp4, n, k, 52);
    try {
      make_fp4_mma_weight(w);
      ADD_FAILURE() << "laid out [" << n << ", " << k << "]";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("[{}, {}]", n, k)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
    }
  }
}

// Automatic selection: only where the MMA is native (NVIDIA, compute capability 8.0 or more); the
// emulation (the CPU test device) only when forced.
TEST(LinearMma, SelectedOnlyWhereTheMmaIsNative) {
  const auto k = linear_kernels().instantiate("mma");
  DeviceInfo hopper;
  hopper.kind = DeviceKind::gpu;
  hopper.nv_compute_capability = 90;
  EXPECT_TRUE(k->selectable(hopper));
  DeviceInfo turing = hopper;
  turing.nv_compute_capability = 75;
  const Verdict no = k->selectable(turing);
  EXPECT_FALSE(no);
  EXPECT_NE(no.reason().find("only when forced"), std::string::npos) << no.reason();
  EXPECT_TRUE(k->designed_for(LinearRegime::decode, DeviceKind::gpu));
  EXPECT_TRUE(k->designed_for(LinearRegime::prefill, DeviceKind::gpu));
  EXPECT_FALSE(k->designed_for(LinearRegime::decode, DeviceKind::cpu));
  Context& ctx = test::context();
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 256, 41);
  LinearOptions options;
  options.max_tokens = 64;
  Linear layer = Linear::create(ctx, w, {WeightFormat::nvfp4, Activations::bf16}, options);
  if (ctx.info().nv_compute_capability >= 80) {
    EXPECT_EQ(layer.kernel_name(1), "mma");
    EXPECT_EQ(layer.kernel_name(64), "mma");
  } else {
    EXPECT_NE(layer.kernel_name(1), "mma");
    EXPECT_NE(layer.kernel_name(64), "mma");
  }
}

}  // namespace
}  // namespace fp4cl
