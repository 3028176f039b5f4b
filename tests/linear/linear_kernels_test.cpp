// Every linear kernel strategy × scheme (NVFP4/MXFP4 × W4A4/W4A16) × shape against the scalar
// double-precision reference, with the error bound of linear_test_data.hpp. Layers with fp32
// output are also held to 1e-5 of Σ|terms|; for W4A4 that is the comparison with "activations
// quantized on the host with the scalar recipe, then the exact product" (the reference's W4A4 path).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/cpu_denormal_speed.hpp"
#include "kernels/linear_kernel.hpp"
#include "linear/linear_check.hpp"
#include "linear/linear_test_support.hpp"

namespace fp4cl {
namespace {

struct Shape {
  std::int64_t m, n, k;
  OutputType output;
};

struct Case {
  std::string kernel;
  QuantScheme scheme;
  Shape shape;
};

std::string case_label(const Case& c) {
  return c.kernel + "_" + to_string(c.scheme.weight) + (c.scheme.w4a16() ? "_W4A16_" : "_W4A4_") + "m" +
         std::to_string(c.shape.m) + "_n" + std::to_string(c.shape.n) + "_k" + std::to_string(c.shape.k) + "_" +
         to_string(c.shape.output);
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return case_label(info.param); }

// For gtest's messages (instead of a byte dump).
void PrintTo(const Case& c, std::ostream* os) { *os << case_label(c); }

std::vector<Case> all_cases() {
  // K = 2880 (gpt-oss), K not a multiple of 64 (NVFP4 176, 1040; MXFP4 160, 1056), N crossing the
  // 128-row scale tiles (129, 200), M = 1 and 2 (the GEMV's own kernels), M at tile edges (77, 512). W4A4 checks fp32 outputs (1e-5
  // criterion), W4A16 BF16; both output types appear with both.
  const std::vector<Shape> nv = {
      {1, 16, 16, OutputType::fp32},       {2, 72, 448, OutputType::fp32},      {3, 40, 2880, OutputType::bf16},
      {16, 200, 176, OutputType::bf16},
      {77, 129, 1040, OutputType::fp32},   {512, 96, 272, OutputType::bf16},    {1, 4096, 4096, OutputType::bf16},
      {16, 2048, 2880, OutputType::fp32},  {512, 1000, 2880, OutputType::bf16}, {77, 4096, 4096, OutputType::fp32},
  };
  const std::vector<Shape> mx = {
      {1, 16, 32, OutputType::fp32},       {2, 72, 448, OutputType::fp32},      {3, 40, 2880, OutputType::bf16},
      {16, 200, 160, OutputType::bf16},
      {77, 129, 1056, OutputType::fp32},   {512, 96, 288, OutputType::bf16},    {1, 4096, 4096, OutputType::bf16},
      {16, 2048, 2880, OutputType::fp32},  {512, 1000, 2880, OutputType::bf16}, {77, 4096, 4096, OutputType::fp32},
  };
  std::vector<Case> cases;
  for (const std::string& kernel : linear_kernels().names())
    for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4})
      for (Activations a : {Activations::fp4_dynamic, Activations::bf16}) {
        // A strategy that serves one kind of activations only (gemv_int: W4A4) is not run on the
        // other; SchemesAStrategyRefuses checks that this is the only refusal.
        if (!test::kernel_serves(kernel, {f, a})) continue;
        for (Shape s : (f == WeightFormat::nvfp4 ? nv : mx)) {
          // mma serves the MMA layout's tiles only (n % 16, k % 64; its refusals of the others:
          // linear_mma_test); on the CPU test device its MMA is emulated.
          if (kernel == "mma" && (s.n % 16 != 0 || s.k % 64 != 0)) continue;
          // W4A4: fp32 output for the 1e-5 criterion, except the BF16 cases of small layers.
          if (a == Activations::fp4_dynamic && s.n * s.k > 1'000'000) s.output = OutputType::fp32;
          cases.push_back({kernel, {f, a}, s});
        }
      }
  return cases;
}

// Every strategy serves every W4A4 case; a strategy may refuse W4A16 only for its activations.
TEST(LinearKernelSchemes, SchemesAStrategyRefuses) {
  for (const std::string& kernel : linear_kernels().names()) {
    for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
      EXPECT_TRUE(test::kernel_serves(kernel, {f, Activations::fp4_dynamic})) << kernel;
      LinearConfig config;
      config.scheme = {f, Activations::bf16};
      config.n = 64;
      config.k = 256;
      const Verdict v = linear_kernels().instantiate(kernel)->can_implement(config);
      if (!v) {
        EXPECT_NE(v.reason().find("W4A4"), std::string::npos) << kernel << ": " << v.reason();
      }
    }
  }
  // gemv_int serves W4A16 (activations on its integer grid) unless FP4CL_W4A16_INT=0.
  EXPECT_TRUE(test::kernel_serves("gemv_int", {WeightFormat::nvfp4, Activations::bf16}));
}

class LinearKernelTest : public testing::TestWithParam<Case> {
 protected:
  static Context& context() {
    static Context ctx = Context::create();
    return ctx;
  }
};

TEST_P(LinearKernelTest, MatchesReference) {
  const Case& c = GetParam();
  const Shape& s = c.shape;
  Context& ctx = context();
  const auto seed = static_cast<std::uint32_t>(s.m * 7919 + s.n * 104729 + s.k);
  const Fp4Weight w = test::random_weight(c.scheme.weight, s.n, s.k, seed);
  const std::vector<std::uint16_t> x = test::random_activations(s.m, s.k, seed + 1);

  LinearOptions options;
  options.kernel = c.kernel;
  options.output = s.output;
  options.max_tokens = s.m;
  Linear layer = Linear::create(ctx, w, c.scheme, options);
  ASSERT_EQ(layer.kernel_name(s.m), c.kernel);

  std::vector<double> y;
  if (s.output == OutputType::bf16) {
    std::vector<std::uint16_t> out;
    layer.run(x, s.m, out);
    y = test::as_doubles(out);
  } else {
    std::vector<float> out;
    layer.run(x, s.m, out);
    y = test::as_doubles(out);
  }
  // gemv_int under W4A16 multiplies the activations rounded to its grid (README, Numerics): its
  // outputs are checked as the exact products of those (linear_api_test checks the rounding).
  const bool grid = c.kernel == "gemv_int" && c.scheme.w4a16();
  const std::vector<std::uint16_t> x_ref =
      grid ? reference::w4a16_int_grid(x.data(), static_cast<std::int64_t>(x.size())) : x;
  const test::CheckStats stats =
      test::check_against_reference(c.scheme, w, x_ref, s.m, {}, y, s.output == OutputType::bf16, case_label(c));
  EXPECT_GT(stats.checked, 0u);
  // FP32 outputs: at most 1e-5 of Σ|terms| (W4A4: against the activations quantized on the host
  // with the scalar recipe, then the exact product). The bound above is a worst case over every
  // summation order, (k+2)·2^-24 ≈ 2.4e-4 at k = 4096, too wide to notice one wrong code (about
  // 1/k of Σ|terms|); real fp32 sums of these data land near 1e-7.
  if (s.output == OutputType::fp32) {
    EXPECT_LE(stats.worst_relative, 1e-5);
  }
  RecordProperty("checked_outputs", static_cast<int>(stats.checked));
  RecordProperty("worst_error_to_bound", std::to_string(stats.worst_ratio));
}

INSTANTIATE_TEST_SUITE_P(AllKernels, LinearKernelTest, testing::ValuesIn(all_cases()), case_name);

// gemv_words' decode is a 16-lane permute: automatic selection takes it on CPUs whose SIMD holds
// 16 floats (AVX-512) and passes it over on narrower ones (AVX2: gemv_lanes and gemv_int are
// faster there), where it still runs when forced (its 8-entry table decode, WORDS_LUT8: the
// forced runs above on such a device).
TEST(LinearKernelSelection, GemvWordsOnlyWithSixteenFloatSimd) {
  const auto k = linear_kernels().instantiate("gemv_words");
  DeviceInfo avx512;
  avx512.kind = DeviceKind::cpu;
  avx512.preferred_float_width = 16;
  EXPECT_TRUE(k->selectable(avx512));
  DeviceInfo avx2 = avx512;
  avx2.preferred_float_width = 8;
  const Verdict no = k->selectable(avx2);
  EXPECT_FALSE(no);
  EXPECT_NE(no.reason().find("holds 8 floats"), std::string::npos) << no.reason();
  EXPECT_TRUE(k->designed_for(LinearRegime::decode, DeviceKind::cpu));
}

// gemv_denorm decodes E2M1 to fp32 denormals: automatic selection passes it over on CPUs whose
// processor multiplies them slowly (Intel: measured ~40x slower than gemv_words at 2048x768 on
// an AVX-512 Xeon), takes it elsewhere; on GPUs and where denormals are flushed the probe is not asked.
TEST(LinearKernelSelection, GemvDenormNotWhereDenormalsAreSlow) {
  const auto k = linear_kernels().instantiate("gemv_denorm");
  DeviceInfo cpu;
  cpu.kind = DeviceKind::cpu;
  cpu.preferred_float_width = 8;
  cpu.fp32_denormals = true;
  const Verdict v = k->selectable(cpu);
  EXPECT_EQ(static_cast<bool>(v), !host_denormal_speed().slow()) << v.reason();
  if (!v) {
    EXPECT_NE(v.reason().find("multiplies fp32 denormals"), std::string::npos) << v.reason();
  }
  DeviceInfo gpu = cpu;
  gpu.kind = DeviceKind::gpu;
  EXPECT_TRUE(k->selectable(gpu));
  EXPECT_TRUE(linear_kernels().instantiate("gemv_int")->selectable(cpu)) << "integer products: no denormals";
}

}  // namespace
}  // namespace fp4cl
