// gemv_words with AVX-512 BF16 dot products (kernels/linear_gemv_words.cl, WORDS_BF16DOT; CPUs
// with AVX-512 BW, VBMI and BF16) and with its fp32 loop (FP4CL_LINEAR_BF16_DOT=0), against the
// scalar reference: both schemes and both weight formats, the three kernels (1, 2 and
// WORDS_TOKENS tokens per work-item), reruns bit-identical, and
// activations so small that vdpbf16ps would flush them (the fp32 fallback). With
// FP4CL_LINEAR_BF16_DOT=1 the kernel fails to build unless the BF16 path is compiled in, so on a
// processor that has the instructions these cases run it; PathIsTaken sees it in the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cl/fault_injection.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/cpu_bf16_dot.hpp"
#include "linear/linear_check.hpp"
#include "linear/linear_test_data.hpp"
#include "linear/linear_test_support.hpp"

namespace fp4cl {
namespace {

using test::context;
using test::ScopedEnv;

constexpr const char* kEnv = "FP4CL_LINEAR_BF16_DOT";
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};
const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kMxW4A16{WeightFormat::mxfp4, Activations::bf16};
const QuantScheme kMxW4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};

bool bf16_dot_available() {
  ScopedEnv unset(kEnv, std::nullopt);
  return cpu_bf16_dot_enabled(context(), kEnv);
}

LinearOptions words_options(std::int64_t max_tokens) {
  LinearOptions o;
  o.kernel = "gemv_words";
  o.output = OutputType::fp32;
  o.max_tokens = max_tokens;
  o.tuning = {{"WORDS_TOKENS", 3}, {"WORDS_LOCAL", 2}};
  return o;
}

std::vector<float> run(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t m, std::int64_t k) {
  const std::vector<std::uint16_t> xm(x.begin(), x.begin() + m * k);
  std::vector<float> y;
  layer.run(xm, m, y);
  return y;
}

std::string label(const QuantScheme& s, const char* env, std::int64_t m) {
  return to_string(s.weight) + std::string(s.w4a16() ? " W4A16" : " W4A4") + " " + kEnv + "=" + env + " m=" + std::to_string(m);
}

TEST(LinearBf16Dot, BadSettingIsAnError) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 32, 64, 1);
  {
    ScopedEnv bad(kEnv, "yes");
    test::expect_error([&] { Linear::create(context(), w, kNvW4A16, words_options(4)); },
                       {"FP4CL_LINEAR_BF16_DOT = 'yes': expected 0 (off) or 1"});
  }
  if (!bf16_dot_available()) {
    ScopedEnv on(kEnv, "1");
    test::expect_error([&] { Linear::create(context(), w, kNvW4A16, words_options(4)); },
                       {"FP4CL_LINEAR_BF16_DOT = 1, but"});
  }
}

// K = 2880 (1440 pairs: the tiny-activation scan's 32-value steps only) and 1040 (NVFP4: its
// last 8 pairs scanned apart) or 1056 (MXFP4). N = 40: a partial group of 16 rows. m = 1, 2 and 7 (the
// single, pair and 3-token kernels, the last group partial).
TEST(LinearBf16Dot, MatchesReferenceAndIsDeterministic) {
  const bool available = bf16_dot_available();
  RecordProperty("bf16_dot_available", available ? 1 : 0);
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4, kMxW4A16, kMxW4A4}) {
    for (const std::int64_t k : {std::int64_t{2880}, std::int64_t{scheme.weight == WeightFormat::nvfp4 ? 1040 : 1056}}) {
      const std::int64_t n = 40, max_m = 7;
      const auto seed = static_cast<std::uint32_t>(k + (scheme.w4a16() ? 1 : 2) + 10 * static_cast<int>(scheme.weight));
      const Fp4Weight w = test::random_weight(scheme.weight, n, k, seed);
      const std::vector<std::uint16_t> x = test::random_activations(max_m, k, seed + 1);
      for (const char* env : {"0", "1"}) {
        if (std::string(env) == "1" && !available) continue;
        ScopedEnv setting(kEnv, env);
        Linear layer = Linear::create(context(), w, scheme, words_options(max_m));
        ASSERT_EQ(layer.kernel_name(1), "gemv_words");
        for (const std::int64_t m : {std::int64_t{1}, std::int64_t{2}, max_m}) {
          const std::vector<std::uint16_t> xm(x.begin(), x.begin() + m * k);
          const std::vector<float> y = run(layer, x, m, k);
          const test::CheckStats stats =
              test::check_against_reference(scheme, w, xm, m, {}, test::as_doubles(y), false, label(scheme, env, m));
          EXPECT_LE(stats.worst_relative, 1e-5) << label(scheme, env, m);
          EXPECT_EQ(y, run(layer, x, m, k)) << label(scheme, env, m) << ": a rerun differs";
        }
      }
    }
  }
}

// Which path ran, seen in the output: all weights 1.0 (code 2, E4M3 scale 1.0, global scale 1),
// and in each row's first chunk x[0] = 2^24, x[1] = x[5] = 1, the rest 0. The fp32 loop sums
// elements 4i + r in chain r: (2^24 + 2) + 0 = 2^24 + 2, exact. The BF16 path sums element pairs
// (0, 1) and (4, 5) in one chain: 2^24 + 1 rounds to 2^24 (ties to even), twice: 2^24. (On
// typical data the chunk sums are exact in both orders and the two paths agree bit for bit;
// under NVFP4 W4A4 always, a block's activations sharing one scale.)
struct PathInputs {
  static constexpr std::int64_t n = 16, k = 64;
  Fp4Weight w = test::random_weight(WeightFormat::nvfp4, n, k, 71);
  std::vector<std::uint16_t> x = std::vector<std::uint16_t>(static_cast<std::size_t>(k), 0);
  PathInputs() {
    for (std::uint8_t& b : w.packed) b = 0x22;
    for (std::uint8_t& s : w.scales) s = 0x38;
    w.global_scale = 1.0f;
    x[0] = 0x4B80;  // 2^24
    x[1] = x[5] = 0x3F80;
  }
};

TEST(LinearBf16Dot, PathIsTaken) {
  const bool available = bf16_dot_available();
  const PathInputs in;
  for (const char* env : {"0", "1"}) {
    if (std::string(env) == "1" && !available) continue;
    ScopedEnv setting(kEnv, env);
    Linear layer = Linear::create(context(), in.w, kNvW4A16, words_options(1));
    const std::vector<float> y = run(layer, in.x, 1, in.k);
    for (const float v : y) EXPECT_EQ(v, std::string(env) == "1" ? 0x1p24f : 0x1p24f + 2.0f) << kEnv << "=" << env;
  }
}

// A device whose OpenCL compiler refuses kernels/bf16_dot_probe.cl (each clang version's BF16
// builtins take their own operand types; here the refusal is injected into the probe's builds as
// CL_BUILD_PROGRAM_FAILURE) takes the fp32 loop, as PathIsTaken sees it, remembers the refusal
// (no second build), and FP4CL_LINEAR_BF16_DOT = 1 then fails naming the compiler's error. The
// device's real compiler answers again once the probes are forgotten (yes with PoCL 3.1 and LLVM
// 15; no with PoCL 5.0 and LLVM 16 before kernels/common/bf16_dot.cl's vdpbf16ps became inline
// assembly there).
TEST(LinearBf16Dot, ACompilerThatRefusesTheProbeTurnsThemOff) {
  if (context().info().kind != DeviceKind::cpu || !cpu_has_avx512_bf16())
    GTEST_SKIP() << "not a CPU device on a processor with AVX-512 BF16: the probe is never built";
  ScopedEnv unset(kEnv, std::nullopt);
  detail::forget_bf16_dot_probes();
  const bool real_answer = cpu_bf16_dot_enabled(context(), kEnv);
  detail::forget_bf16_dot_probes();
  // The test context's device, in a context of its own (a program cache that has not built the probe).
  const Context fresh = Context::create(std::to_string(context().info().platform_index) + ":" +
                                        std::to_string(context().info().device_index));
  {
    const fault_injection::Scope refuse({fault_injection::build, 1, 1, -11});  // CL_BUILD_PROGRAM_FAILURE
    EXPECT_FALSE(cpu_bf16_dot_enabled(fresh, kEnv));
    EXPECT_GE(fault_injection::faults_injected(), 1);
  }
  {
    const fault_injection::Scope count({fault_injection::build, 0, 0, -11});
    EXPECT_FALSE(cpu_bf16_dot_enabled(fresh, kEnv));
    EXPECT_EQ(fault_injection::calls_counted(), 0);  // remembered, not built again
  }
  const PathInputs in;
  {
    Linear layer = Linear::create(fresh, in.w, kNvW4A16, words_options(1));
    for (const float v : run(layer, in.x, 1, in.k)) EXPECT_EQ(v, 0x1p24f + 2.0f);  // PathIsTaken's fp32 loop sum
  }
  {
    ScopedEnv on(kEnv, "1");
    test::expect_error([&] { Linear::create(fresh, in.w, kNvW4A16, words_options(1)); },
                       {"FP4CL_LINEAR_BF16_DOT = 1, but the OpenCL compiler of", "does not build the AVX-512 BF16",
                        "bf16_dot_probe.cl", "CL_BUILD_PROGRAM_FAILURE"});
  }
  detail::forget_bf16_dot_probes();
  EXPECT_EQ(cpu_bf16_dot_enabled(fresh, kEnv), real_answer);
}

// vdpbf16ps as inline assembly (kernels/common/bf16_dot.cl: the form of clang 16 and later, whose
// builtin takes other operand types and crashed clang 16) gives the bits of clang 11-15's builtin
// and of a scalar sum: kernels/bf16_dot_probe.cl built both ways (FP4_BF16DOT_ASM forces the
// assembly; on clang 16 and later both builds are the assembly), 16 rows of E2M1 weights with two
// BF16 activation pairs, every sum exact.
TEST(LinearBf16Dot, TheAssemblyFormMatchesTheBuiltin) {
  if (const std::string why = cpu_bf16_dot_unavailable(context()); !why.empty())
    GTEST_SKIP() << "no AVX-512 BF16 dot products here: " << why;
  static const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<std::uint32_t> w(16), x(16, 0u);
  x[0] = 0x3F80u | 0x4000u << 16;  // pair 0: 1, 2
  x[1] = 0xBF00u | 0x4080u << 16;  // pair 1: -0.5, 4
  std::vector<float> expected(16);
  for (std::uint32_t r = 0; r < 16; ++r) {
    for (std::uint32_t j = 0; j < 8; ++j) w[r] |= ((r * 3u + j * 5u) & 15u) << (4 * j);
    const auto e = [&](std::uint32_t j) { return kE2M1[(w[r] >> (4 * j)) & 15u]; };
    // Nibble pair p: nibbles p and p + 4 with activation pair p.
    expected[r] = e(0) * 1.0f + e(4) * 2.0f + e(1) * -0.5f + e(5) * 4.0f;
  }
  const Context& ctx = context();
  const auto run_probe = [&](const BuildOptions& options) {
    cl::Kernel kernel(ctx.programs().program("bf16_dot_probe.cl", options), "bf16_dot_probe");
    cl::Buffer wb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, std::size_t{64}, w.data());
    cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, std::size_t{64}, x.data());
    std::vector<float> y(16, -1.0f);
    cl::Buffer yb(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, std::size_t{64}, y.data());
    kernel.setArg(0, wb);
    kernel.setArg(1, xb);
    kernel.setArg(2, yb);
    ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(1), cl::NDRange(1));
    ctx.queue().enqueueReadBuffer(yb, CL_TRUE, 0, 64, y.data());
    return y;
  };
  const std::vector<float> builtin = run_probe(BuildOptions().define("FP4_DPBF16"));
  const std::vector<float> assembly = run_probe(BuildOptions().define("FP4_DPBF16").define("FP4_BF16DOT_ASM"));
  for (std::size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(builtin[r], expected[r]) << "row " << r;
    EXPECT_EQ(assembly[r], expected[r]) << "row " << r;
  }
}

// Activations that vdpbf16ps would flush (BF16 exponent fields 0 to 2: token 0 all denormals, the
// others below 2^-124, token 3 normal, token 4 one denormal at the end): the work-items fall back to the fp32 loop, so results
// are still IEEE fp32 arithmetic's. The weight's global scale is raised by 2^100 so that such
// sums reach the output as normal numbers (MXFP4: its block scales). W4A16 (the BF16 input read directly) and MXFP4 W4A4
// (tiny E8M0 block scales make tiny activations; NVFP4 W4A4's global input scale makes them
// normal, run too).
TEST(LinearBf16Dot, TinyActivationsFallBack) {
  const bool available = bf16_dot_available();
  const std::int64_t n = 48, m = 5;
  for (const QuantScheme& scheme : {kNvW4A16, kMxW4A16, kNvW4A4, kMxW4A4}) {
    const std::int64_t k = scheme.weight == WeightFormat::nvfp4 ? 1040 : 1056;
    Fp4Weight w = test::random_weight(scheme.weight, n, k, 61);
    if (scheme.weight == WeightFormat::nvfp4) {
      w.global_scale = std::ldexp(w.global_scale, 100);
    } else {
      for (std::uint8_t& s : w.scales) s = static_cast<std::uint8_t>(s + 100);  // E8M0: × 2^100
    }
    std::vector<std::uint16_t> x = test::random_activations(m, k, 62);
    for (std::int64_t i = 0; i < 3 * k; ++i) {
      const auto bits = static_cast<unsigned>(x[static_cast<std::size_t>(i)]);
      const unsigned exponent = i < k ? 0u : 1u + static_cast<unsigned>(i % 2);  // token 0: denormals
      x[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>((bits & 0x807Fu) | (exponent << 7) | (i < k ? 1u : 0u));
    }
    // Token 4: zeros but its last element, a denormal (the scan's last 8 pairs).
    std::fill(x.begin() + 4 * k, x.end(), std::uint16_t{0});
    x.back() = 0x0041;
    ScopedEnv setting(kEnv, available ? "1" : "0");
    LinearOptions o = words_options(m);
    Linear layer = Linear::create(context(), w, scheme, o);
    for (const std::int64_t mm : {std::int64_t{1}, std::int64_t{2}, m}) {
      const std::vector<std::uint16_t> xm(x.begin(), x.begin() + mm * k);
      const std::vector<float> y = run(layer, x, mm, k);
      const test::CheckStats stats =
          test::check_against_reference(scheme, w, xm, mm, {}, test::as_doubles(y), false, "tiny " + label(scheme, "", mm));
      EXPECT_LE(stats.worst_relative, 1e-5) << "tiny " << label(scheme, "", mm);
      bool nonzero = false;
      for (std::int64_t r = 0; r < n; ++r) nonzero = nonzero || y[static_cast<std::size_t>(r)] != 0.0f;
      if (scheme.w4a16()) {
        EXPECT_TRUE(nonzero) << "token 0's sums do not reach the output: the test would not see them flushed";
      }
      EXPECT_EQ(y, run(layer, x, mm, k)) << "tiny: a rerun differs";
    }
  }
}

// The weights' software prefetch (WORDS_PREFETCH, chunks ahead; 0: none) moves no bits: the same
// outputs with 0, 1, 32 (the CPU default) and 4096 (every prefetch past the buffer's end), for
// both schemes and the three kernels; a value outside 0..4096 is refused by name.
TEST(LinearBf16Dot, PrefetchChangesNoBits) {
  for (const QuantScheme& scheme : {kNvW4A16, kNvW4A4, kMxW4A16}) {
    const std::int64_t n = 40, k = 1056, max_m = 7;
    const Fp4Weight w = test::random_weight(scheme.weight, n, k, 91);
    const std::vector<std::uint16_t> x = test::random_activations(max_m, k, 92);
    std::vector<std::vector<float>> first;
    for (const long long prefetch : {0LL, 1LL, 32LL, 4096LL}) {
      LinearOptions o = words_options(max_m);
      o.tuning["WORDS_PREFETCH"] = prefetch;
      Linear layer = Linear::create(context(), w, scheme, o);
      std::vector<std::vector<float>> out;
      for (const std::int64_t m : {std::int64_t{1}, std::int64_t{2}, max_m}) out.push_back(run(layer, x, m, k));
      if (first.empty()) first = out;
      EXPECT_EQ(out, first) << label(scheme, "", 0) << " WORDS_PREFETCH=" << prefetch;
    }
  }
  LinearOptions o = words_options(4);
  o.tuning["WORDS_PREFETCH"] = -1;
  test::expect_error([&] { Linear::create(context(), test::random_weight(WeightFormat::nvfp4, 32, 64, 1), kNvW4A16, o); },
                     {"WORDS_PREFETCH = -1 is outside 0..4096"});
}

}  // namespace
}  // namespace fp4cl
