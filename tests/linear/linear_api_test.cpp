// The Linear layer's API: bias, determinism, device buffers with event wait lists, m = 0, kernel
// selection (automatic, forced by option or FP4CL_LINEAR_KERNEL) and argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"
#include "kernels/moe_registry.hpp"  // mma_native
#include "linear/linear_check.hpp"
#include "linear/linear_test_support.hpp"

namespace fp4cl {
namespace {

using test::context;
using test::error_of;
using test::ScopedEnv;

const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};
const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kMxW4A16{WeightFormat::mxfp4, Activations::bf16};
const QuantScheme kMxW4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};

LinearOptions options_for(const std::string& kernel, OutputType out, std::int64_t max_tokens) {
  LinearOptions o;
  o.kernel = kernel;
  o.output = out;
  o.max_tokens = max_tokens;
  return o;
}

// One token of BF16 denormals (none zero, k elements) through `kernel` on w with every block scale
// raised by 2^100 (NVFP4: the global scale; MXFP4: each E8M0 byte), so that the token's sums reach
// the normal range: within the reference's bound, and not flushed (most outputs nonzero). Returns
// the token and the layer (on the raised weight, which `w` becomes).
std::pair<std::vector<std::uint16_t>, Linear> check_denormal_token(const std::string& kernel, const QuantScheme& scheme,
                                                                 Fp4Weight& w, std::uint32_t seed) {
  if (scheme.weight == WeightFormat::nvfp4) {
    w.global_scale = std::ldexp(w.global_scale, 100);
  } else {
    for (std::uint8_t& s : w.scales) s = static_cast<std::uint8_t>(s + 100);  // E8M0: × 2^100
  }
  std::vector<std::uint16_t> tiny = test::random_activations(1, w.k, seed);
  for (std::uint16_t& v : tiny) v = static_cast<std::uint16_t>((v & 0x807Fu) | 1u);
  std::vector<float> y;
  Linear layer = Linear::create(context(), w, scheme, options_for(kernel, OutputType::fp32, 1));
  layer.run(tiny, 1, y);
  test::check_against_reference(scheme, w, tiny, 1, {}, test::as_doubles(y), false,
                                kernel + " denormal activations " + std::string(scheme.name()));
  int nonzero = 0;
  for (const float v : y) nonzero += v != 0.0f;
  EXPECT_GT(nonzero, w.n / 2) << kernel << ": the denormal activations were flushed";
  return {std::move(tiny), std::move(layer)};
}

cl::Buffer device_buffer(std::size_t bytes, const void* data = nullptr) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(context().opencl_context(), CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes,
               const_cast<void*>(data), &err);
  EXPECT_EQ(err, CL_SUCCESS);
  return b;
}

// ---------------------------------------------------------------- results

TEST(LinearApi, BiasIsAddedToEveryRow) {
  for (const std::string& kernel : linear_kernels().names()) {
    for (const QuantScheme& scheme : {kNvW4A16, kMxW4A4}) {
      // gemv_int: W4A4 only; mma: n % 16 == 0 only (its bias: linear_mma_test)
      if (!test::kernel_serves(kernel, scheme, 70, 320)) continue;
      const Fp4Weight w = test::random_weight(scheme.weight, 70, 320, 5);
      const std::vector<std::uint16_t> x = test::random_activations(9, 320, 6);
      LinearOptions o = options_for(kernel, OutputType::fp32, 9);
      for (std::int64_t i = 0; i < w.n; ++i) o.bias.push_back(static_cast<float>(i % 7) * 0.75f - 2.0f);
      Linear layer = Linear::create(context(), w, scheme, o);
      std::vector<float> y;
      layer.run(x, 9, y);
      test::check_against_reference(scheme, w, x, 9, o.bias, test::as_doubles(y), false,
                                    kernel + " " + scheme.name() + " with bias");
    }
  }
}

TEST(LinearApi, RunsAreBitIdentical) {
  for (const std::string& kernel : linear_kernels().names()) {
    for (const QuantScheme& scheme : {kNvW4A4, kMxW4A16}) {
      // gemv_int: W4A4 only; mma: n % 16 == 0 only (its repeats: linear_mma_test)
      if (!test::kernel_serves(kernel, scheme, 300, 1024)) continue;
      const Fp4Weight w = test::random_weight(scheme.weight, 300, 1024, 11);
      const std::vector<std::uint16_t> x = test::random_activations(77, 1024, 12);
      Linear layer = Linear::create(context(), w, scheme, options_for(kernel, OutputType::fp32, 77));
      std::vector<float> a, b;
      layer.run(x, 77, a);
      layer.run(x, 77, b);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kernel << " " << scheme.name();
      // A second layer from the same weights computes the same bits.
      Linear again = Linear::create(context(), w, scheme, options_for(kernel, OutputType::fp32, 77));
      again.run(x, 77, b);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kernel << " " << scheme.name();
    }
  }
}

// gemv_int's two ways to sum its exact integer products (vpmaddubsw on offset codes where the
// OpenCL compiler offers the AVX2 builtins; FP4CL_LINEAR_AVX2=0: the portable OpenCL C sums) give
// the same bits, for NVFP4 and MXFP4 (blocks of 16 and 32), W4A4 and W4A16 (two planes), and 1 to
// 5 tokens a call; any other value of the switch is an error naming it.
TEST(LinearApi, GemvIntSumsAreTheSameWithAndWithoutAvx2) {
  for (const QuantScheme& scheme : {kNvW4A4, kMxW4A4, kNvW4A16, kMxW4A16}) {
    const Fp4Weight w = test::random_weight(scheme.weight, 72, 1024, 13);
    const std::vector<std::uint16_t> x = test::random_activations(5, 1024, 14);
    for (const std::int64_t m : {1, 2, 5}) {
      const std::vector<std::uint16_t> xm(x.begin(), x.begin() + m * 1024);
      std::vector<float> fast, portable;
      {
        ScopedEnv env("FP4CL_LINEAR_AVX2", std::nullopt);
        Linear::create(context(), w, scheme, options_for("gemv_int", OutputType::fp32, 5)).run(xm, m, fast);
      }
      {
        ScopedEnv env("FP4CL_LINEAR_AVX2", "0");
        Linear::create(context(), w, scheme, options_for("gemv_int", OutputType::fp32, 5)).run(xm, m, portable);
      }
      ASSERT_EQ(fast.size(), portable.size());
      EXPECT_EQ(std::memcmp(fast.data(), portable.data(), fast.size() * sizeof(float)), 0) << scheme.name() << " " << m;
    }
  }
  ScopedEnv env("FP4CL_LINEAR_AVX2", "yes");
  try {
    Linear::create(context(), test::random_weight(WeightFormat::nvfp4, 8, 64, 15), kNvW4A4,
                   options_for("gemv_int", OutputType::fp32, 1));
    ADD_FAILURE() << "no error for FP4CL_LINEAR_AVX2=yes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FP4CL_LINEAR_AVX2 = 'yes'"), std::string::npos) << e.what();
  }
}

// gemv_int's software prefetch (INT_PREFETCH, chunks ahead; 0: none) moves no bits: the same
// outputs with 0, 1, 64 (the CPU default) and 4096 (every prefetch past the buffer's end), NVFP4
// and MXFP4, 1, 2 and 5 tokens; a value outside 0..4096 is refused by name.
TEST(LinearApi, GemvIntPrefetchChangesNoBits) {
  for (const QuantScheme& scheme : {kNvW4A4, kMxW4A4}) {
    const Fp4Weight w = test::random_weight(scheme.weight, 40, 1056, 21);
    const std::vector<std::uint16_t> x = test::random_activations(5, 1056, 22);
    std::vector<std::vector<float>> first;
    for (const long long prefetch : {0LL, 1LL, 64LL, 4096LL}) {
      LinearOptions o = options_for("gemv_int", OutputType::fp32, 5);
      o.tuning["INT_PREFETCH"] = prefetch;
      Linear layer = Linear::create(context(), w, scheme, o);
      std::vector<std::vector<float>> out;
      for (const std::int64_t m : {1, 2, 5}) {
        std::vector<float> y;
        layer.run(std::vector<std::uint16_t>(x.begin(), x.begin() + m * 1056), m, y);
        out.push_back(y);
      }
      if (first.empty()) first = out;
      EXPECT_EQ(out, first) << scheme.name() << " INT_PREFETCH=" << prefetch;
    }
  }
  LinearOptions o = options_for("gemv_int", OutputType::fp32, 4);
  o.tuning["INT_PREFETCH"] = 4097;
  try {
    Linear::create(context(), test::random_weight(WeightFormat::nvfp4, 32, 64, 1), kNvW4A4, o);
    ADD_FAILURE() << "no error for INT_PREFETCH = 4097";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("INT_PREFETCH = 4097 is outside 0..4096"), std::string::npos) << e.what();
  }
}

// gemv_denorm scales each 16-element chunk of the activations by 2^(126 - E) and multiplies the
// chunk's sum back by 2^E: against the reference for chunks whose largest element is 2^100 beside
// elements near 2^-20, chunks of BF16 denormals (with the weight's global scale raised by 2^100 so
// that their sums reach the output), a chunk of zeros and ordinary ones; NVFP4 and MXFP4, 1, 2 and
// 5 tokens. An infinite activation gives infinite or NaN outputs, as fp32 arithmetic does.
TEST(LinearApi, GemvDenormScalesActivationChunks) {
  if (!context().info().fp32_denormals) GTEST_SKIP() << "gemv_denorm needs fp32 denormals";
  const std::int64_t n = 40, k = 1056, m = 5;
  for (const QuantScheme& scheme : {kNvW4A16, kMxW4A16}) {
    Fp4Weight w = test::random_weight(scheme.weight, n, k, 71);
    std::vector<std::uint16_t> x = test::random_activations(m, k, 72);
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t i = 0; i < k; ++i) {
        std::uint16_t& v = x[static_cast<std::size_t>(t * k + i)];
        const std::int64_t chunk = i / 16;
        if (chunk % 4 == 1) {  // one element at 2^100, the rest near 2^-20
          const unsigned exponent = i % 16 == 3 ? 127u + 100u : 127u - 20u - static_cast<unsigned>(i % 3);
          v = static_cast<std::uint16_t>((v & 0x807Fu) | (exponent << 7));
        } else if (chunk % 4 == 2 && t == 1) {
          v = static_cast<std::uint16_t>(v & 0x807Fu);  // denormals (or zeros)
        } else if (chunk == 3) {
          v = 0;
        }
      }
    for (const std::int64_t mm : {std::int64_t{1}, std::int64_t{2}, m}) {
      std::vector<float> y;
      Linear layer = Linear::create(context(), w, scheme, options_for("gemv_denorm", OutputType::fp32, m));
      const std::vector<std::uint16_t> xm(x.begin(), x.begin() + mm * k);
      layer.run(xm, mm, y);
      test::check_against_reference(scheme, w, xm, mm, {}, test::as_doubles(y), false,
                                    "gemv_denorm wide " + std::string(scheme.name()) + " m=" + std::to_string(mm));
    }
    // Only denormal chunks, with sums lifted into the normal range by the weight scales.
    auto [tiny, layer] = check_denormal_token("gemv_denorm", scheme, w, 73);
    std::vector<float> y;
    // An infinity: no finite output where its row's weight is nonzero.
    tiny[5] = 0x7F80;
    layer.run(tiny, 1, y);
    int finite = 0;
    for (const float v : y) finite += std::isfinite(v);
    EXPECT_LT(finite, n) << "an infinite activation left every output finite";
  }
}

// gemv_int under W4A16 multiplies each activation on its chunk's integer grid (q · 2^(E - 14),
// |q| < 2^14): exactly the products of the activations rounded to that grid, which the reference
// computes in doubles (reference::w4a16_int_grid, independently of the kernel's integer shifts), so
// that the layer gives the same bits for x and for the rounded x, and the reference's bound holds
// against the rounded x. The data: chunks whose largest element is 2^4 beside elements near 2^-20
// (rounded to zero), elements 2^6, 2^7 (ties), 2^8 and 2^9 below their chunk's largest, BF16
// denormals (with the weight's scale raised by 2^100), negative largest elements, zeros and
// ordinary chunks (outputs of order 1 to 100, where one step of the grid shows in fp32); chunks
// whose largest is 2^100 against the reference's bound; NVFP4 and MXFP4, 1, 2 and 5 tokens. A NaN
// or an infinity makes its token's outputs NaN and leaves the other tokens' bits alone.
TEST(LinearApi, GemvIntW4A16MultipliesTheActivationsOnTheirGrid) {
  const std::int64_t n = 40, k = 1056, m = 5;
  for (const QuantScheme& scheme : {kNvW4A16, kMxW4A16}) {
    Fp4Weight w = test::random_weight(scheme.weight, n, k, 81);
    std::vector<std::uint16_t> x = test::random_activations(m, k, 82);
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t i = 0; i < k; ++i) {
        std::uint16_t& v = x[static_cast<std::size_t>(t * k + i)];
        const std::int64_t chunk = i / 16, j = i % 16;
        if (chunk % 5 == 1) {  // one element at 2^4, the rest near 2^-20
          const unsigned exponent = j == 3 ? 127u + 4u : 127u - 20u - static_cast<unsigned>(i % 3);
          v = static_cast<std::uint16_t>((v & 0x807Fu) | (exponent << 7));
        } else if (chunk % 5 == 2) {  // largest -1.xxx · 2^0 (j = 0), the others 2^6 .. 2^9 below
          const unsigned exponent = j == 0 ? 127u : 127u - 6u - static_cast<unsigned>(j % 4);
          v = static_cast<std::uint16_t>(((j == 0 ? (v | 0x8000u) : v) & 0x807Fu) | (exponent << 7));
        } else if (chunk % 5 == 3 && t == 1) {
          v = static_cast<std::uint16_t>(v & 0x807Fu);  // denormals (or zeros)
        } else if (chunk == 4) {
          v = 0;
        }
      }
    const std::vector<std::uint16_t> grid = reference::w4a16_int_grid(x.data(), static_cast<std::int64_t>(x.size()));
    int rounded = 0;
    for (std::size_t i = 0; i < x.size(); ++i) rounded += grid[i] != x[i];
    EXPECT_GT(rounded, 100) << "the data should exercise the rounding";
    // Wide chunks: 2^100 beside 2^-20.
    std::vector<std::uint16_t> wide = x;
    for (std::size_t i = 3; i < wide.size(); i += 80)
      wide[i] = static_cast<std::uint16_t>((wide[i] & 0x807Fu) | (227u << 7));
    for (const std::int64_t mm : {std::int64_t{1}, std::int64_t{2}, m}) {
      Linear layer = Linear::create(context(), w, scheme, options_for("gemv_int", OutputType::fp32, m));
      const std::vector<std::uint16_t> xm(x.begin(), x.begin() + mm * k), gm(grid.begin(), grid.begin() + mm * k);
      std::vector<float> y, yg;
      layer.run(xm, mm, y);
      layer.run(gm, mm, yg);
      ASSERT_EQ(y.size(), yg.size());
      EXPECT_EQ(std::memcmp(y.data(), yg.data(), y.size() * sizeof(float)), 0) << scheme.name() << " m=" << mm;
      test::check_against_reference(scheme, w, gm, mm, {}, test::as_doubles(y), false,
                                    "gemv_int W4A16 grid " + std::string(scheme.name()) + " m=" + std::to_string(mm));
      const std::vector<std::uint16_t> wm(wide.begin(), wide.begin() + mm * k);
      layer.run(wm, mm, y);
      test::check_against_reference(scheme, w, wm, mm, {}, test::as_doubles(y), false,
                                    "gemv_int W4A16 wide " + std::string(scheme.name()) + " m=" + std::to_string(mm));
    }
    // Only denormal chunks, with sums lifted into the normal range by the weight scales.
    Fp4Weight lifted = w;
    const auto [tiny, small] = check_denormal_token("gemv_int", scheme, lifted, 83);
    EXPECT_EQ(reference::w4a16_int_grid(tiny.data(), static_cast<std::int64_t>(tiny.size())), tiny)
        << "BF16 denormals lie on their chunk's grid";
    // NaN and an infinity in token 1 of 3: its outputs are NaN, the others' bits unchanged.
    Linear layer = Linear::create(context(), w, scheme, options_for("gemv_int", OutputType::fp32, 3));
    const std::vector<std::uint16_t> x3(x.begin(), x.begin() + 3 * k);
    std::vector<float> clean, spoiled;
    layer.run(x3, 3, clean);
    for (const std::uint16_t bad : {std::uint16_t{0x7FC0}, std::uint16_t{0xFF80}}) {
      std::vector<std::uint16_t> xb = x3;
      xb[static_cast<std::size_t>(k + 37)] = bad;
      layer.run(xb, 3, spoiled);
      for (std::int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(std::isnan(spoiled[static_cast<std::size_t>(n + r)])) << std::hex << bad << " row " << r;
        for (const std::int64_t t : {std::int64_t{0}, std::int64_t{2}}) {
          const auto i = static_cast<std::size_t>(t * n + r);
          EXPECT_EQ(std::memcmp(&spoiled[i], &clean[i], sizeof(float)), 0) << "token " << t << " row " << r;
        }
      }
    }
  }
}

// FP4CL_W4A16_INT=0 keeps W4A16 off the integer grid: gemv_int refuses W4A16 by that name, and
// automatic selection takes a kernel with exact BF16 products; any other value is an error naming it.
TEST(LinearApi, W4A16IntSwitch) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 128, 91);
  {
    ScopedEnv env("FP4CL_W4A16_INT", "0");
    try {
      Linear::create(context(), w, kNvW4A16, options_for("gemv_int", OutputType::fp32, 1));
      ADD_FAILURE() << "gemv_int took W4A16 under FP4CL_W4A16_INT=0";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FP4CL_W4A16_INT=0"), std::string::npos) << e.what();
    }
    ScopedEnv automatic("FP4CL_LINEAR_KERNEL", std::nullopt);
    EXPECT_NE(Linear::create(context(), w, kNvW4A16, options_for("", OutputType::fp32, 1)).kernel_name(1), "gemv_int");
    // W4A4 is not affected.
    Linear::create(context(), w, kNvW4A4, options_for("gemv_int", OutputType::fp32, 1));
  }
  ScopedEnv env("FP4CL_W4A16_INT", "maybe");
  try {
    Linear::create(context(), w, kNvW4A16, options_for("gemv_int", OutputType::fp32, 1));
    ADD_FAILURE() << "no error for FP4CL_W4A16_INT=maybe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FP4CL_W4A16_INT = 'maybe'"), std::string::npos) << e.what();
  }
}

TEST(LinearApi, W4A16IgnoresTheInputGlobalScale) {
  Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 48, 256, 3);
  const std::vector<std::uint16_t> x = test::random_activations(2, 256, 4);
  std::vector<float> a, b;
  Linear::create(context(), w, kNvW4A16, options_for("", OutputType::fp32, 2)).run(x, 2, a);
  // Calibrated values (here broken ones) W4A16 must not use.
  w.input_global_scale = std::numeric_limits<float>::quiet_NaN();
  w.input_scale = 0.0f;
  Linear::create(context(), w, kNvW4A16, options_for("", OutputType::fp32, 2)).run(x, 2, b);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(LinearApi, DeviceBuffersWaitForTheWaitList) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 96, 512, 21);
  const std::vector<std::uint16_t> x = test::random_activations(5, 512, 22);
  Linear layer = Linear::create(context(), w, kNvW4A16, options_for("", OutputType::bf16, 8));
  const cl::Buffer xb = device_buffer(x.size() * 2, x.data());
  const cl::Buffer yb = device_buffer(5 * 96 * 2);

  cl_int err = CL_SUCCESS;
  cl::UserEvent gate(context().opencl_context(), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  cl::Event done = layer.enqueue(xb, yb, 5, {gate});
  // Nothing can run before the gate opens.
  EXPECT_NE(done.getInfo<CL_EVENT_COMMAND_EXECUTION_STATUS>(), CL_COMPLETE);
  // Activation pass and matmul; gemv_words (the CPU default), gemv_split (the GPU default) and mma
  // (the default with tensor cores) read W4A16's BF16 input themselves.
  const std::string kernel = layer.kernel_name(5);
  EXPECT_EQ(layer.last_events().size(), kernel == "gemv_words" || kernel == "gemv_split" || kernel == "mma" ? 1u : 2u)
      << kernel;
  EXPECT_EQ(layer.last_events().back()(), done());
  ASSERT_EQ(gate.setStatus(CL_COMPLETE), CL_SUCCESS);
  ASSERT_EQ(done.wait(), CL_SUCCESS);

  std::vector<std::uint16_t> from_device(5 * 96), from_host;
  ASSERT_EQ(context().queue().enqueueReadBuffer(yb, CL_TRUE, 0, from_device.size() * 2, from_device.data()),
            CL_SUCCESS);
  layer.run(x, 5, from_host);
  EXPECT_EQ(from_device, from_host);
  test::check_against_reference(kNvW4A16, w, x, 5, {}, test::as_doubles(from_device), true, "enqueue");
}

TEST(LinearApi, ZeroTokensIsANoOp) {
  const Fp4Weight w = test::random_weight(WeightFormat::mxfp4, 32, 64, 1);
  Linear layer = Linear::create(context(), w, kMxW4A4, options_for("", OutputType::fp32, 4));
  const std::vector<float> sentinel(4 * 32, 42.0f);
  const cl::Buffer xb = device_buffer(2), yb = device_buffer(sentinel.size() * 4, sentinel.data());
  cl::Event done = layer.enqueue(xb, yb, 0);
  ASSERT_EQ(done.wait(), CL_SUCCESS);
  std::vector<float> y(sentinel.size());
  ASSERT_EQ(context().queue().enqueueReadBuffer(yb, CL_TRUE, 0, y.size() * 4, y.data()), CL_SUCCESS);
  EXPECT_EQ(y, sentinel);
  std::vector<float> host(3, 1.0f);
  layer.run({}, 0, host);
  EXPECT_TRUE(host.empty());
}

TEST(LinearApi, MetadataForBenchmarks) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 200, 2880, 1);
  Linear layer = Linear::create(context(), w, kNvW4A16, options_for("gemv_rows", OutputType::bf16, 512));
  // codes n·k/2 plus swizzled scales roundup(n,128)·roundup(k/16,4)
  EXPECT_EQ(layer.weight_bytes(), 200u * 1440u + 256u * 180u);
  // The lanes layout: groups of 8 rows, 64 code bytes and 8 scale bytes per group and 16 elements.
  Linear lanes = Linear::create(context(), w, kNvW4A16, options_for("gemv_lanes", OutputType::bf16, 512));
  EXPECT_EQ(lanes.weight_bytes(), 25u * 180u * 64u + 25u * 180u * 8u);
  // The words layout: groups of 16 rows, per group 16 words (64 bytes) per 8 elements and 16 scale
  // bytes per block.
  Linear words = Linear::create(context(), w, kNvW4A16, options_for("gemv_words", OutputType::bf16, 512));
  EXPECT_EQ(words.weight_bytes(), 13u * 360u * 64u + 13u * 180u * 16u);
  // The lanes layout by_quad (gemv_int): groups of 16 rows, 128 code bytes and 16 scale bytes per
  // group and 16 elements.
  Linear quads = Linear::create(context(), w, kNvW4A16, options_for("gemv_int", OutputType::bf16, 512));
  EXPECT_EQ(quads.weight_bytes(), 13u * 180u * 128u + 13u * 180u * 16u);
  EXPECT_EQ(layer.n(), 200);
  EXPECT_EQ(layer.k(), 2880);
  EXPECT_NE(layer.describe().find("NVFP4 W4A16 linear 200x2880"), std::string::npos) << layer.describe();
}

// ---------------------------------------------------------------- kernel selection

TEST(LinearApi, SelectsGemvForDecodeAndGemmForPrefill) {
  ScopedEnv env("FP4CL_LINEAR_KERNEL", std::nullopt);
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 128, 1);
  // The decode GEMVs by device class: on CPUs the words kernel where the SIMD holds 16 floats
  // (AVX-512), else the integer block sums (W4A4) and the shift decode (W4A16); on GPUs the split
  // kernel (with tensor cores the mma kernel, for prefill too); on other devices the rows kernel.
  const DeviceKind kind = context().info().kind;
  const bool tensor_cores = mma_native(context().info());
  const bool simd16 = context().info().preferred_float_width >= 16;
  const std::string gemv = tensor_cores             ? "mma"
                           : kind == DeviceKind::cpu ? "gemv_words"
                           : kind == DeviceKind::gpu ? "gemv_split"
                                                     : "gemv_rows";
  const std::string gemm = tensor_cores ? "mma" : "gemm_tiled";
  const bool narrow_cpu = !tensor_cores && kind == DeviceKind::cpu && !simd16;
  // W4A16 on narrow CPUs: the integer sums too (activations on their grid).
  const std::string gemv_w4a4 = narrow_cpu ? "gemv_int" : gemv;
  const std::string gemv_w4a16 = narrow_cpu ? "gemv_int" : gemv;
  Linear layer = Linear::create(context(), w, kNvW4A4, options_for("", OutputType::bf16, 512));
  EXPECT_EQ(layer.kernel_name(1), gemv_w4a4);
  EXPECT_EQ(layer.kernel_name(512), gemm);
  Linear w4a16 = Linear::create(context(), w, kNvW4A16, options_for("", OutputType::bf16, 512));
  EXPECT_EQ(w4a16.kernel_name(1), gemv_w4a16);
  LinearOptions o = options_for("", OutputType::bf16, 512);
  o.decode_max_tokens = 100;
  Linear custom = Linear::create(context(), w, kNvW4A4, o);
  EXPECT_EQ(custom.kernel_name(100), gemv_w4a4);
  EXPECT_EQ(custom.kernel_name(101), gemm);
  Linear small = Linear::create(context(), w, kNvW4A4, options_for("", OutputType::bf16, 4));
  EXPECT_EQ(small.kernel_name(4), gemv_w4a4);
}

TEST(LinearApi, EnvironmentForcesAKernel) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 128, 1);
  {
    ScopedEnv env("FP4CL_LINEAR_KERNEL", "gemv_rows");
    Linear layer = Linear::create(context(), w, kNvW4A16, options_for("", OutputType::bf16, 512));
    EXPECT_EQ(layer.kernel_name(512), "gemv_rows");
    // The layer options win over the environment.
    Linear opt = Linear::create(context(), w, kNvW4A16, options_for("gemm_tiled", OutputType::bf16, 512));
    EXPECT_EQ(opt.kernel_name(1), "gemm_tiled");
  }
  {
    ScopedEnv env("FP4CL_LINEAR_KERNEL", "turbo");
    const std::string e = error_of([&] { Linear::create(context(), w, kNvW4A16, {}); });
    EXPECT_NE(e.find("unknown linear kernel 'turbo'"), std::string::npos) << e;
    EXPECT_NE(e.find("FP4CL_LINEAR_KERNEL"), std::string::npos) << e;
    EXPECT_NE(e.find("valid names: mma, gemm_tiled, gemv_words, gemv_int, gemv_denorm, gemv_lanes, gemv_split, gemv_rows"), std::string::npos) << e;
  }
}

TEST(LinearApi, RefusalsOfAForcedKernelAreErrors) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 64, 128, 1);
  LinearOptions o = options_for("gemm_tiled", OutputType::bf16, 8);
  o.tuning["GEMM_TILE_N"] = 20;
  std::string e = error_of([&] { Linear::create(context(), w, kNvW4A16, o); });
  EXPECT_NE(e.find("'gemm_tiled' was forced"), std::string::npos) << e;
  EXPECT_NE(e.find("GEMM_TILE_N = 20 is not a positive multiple of FP4CL_VEC × GEMM_WI_N = 16 × "), std::string::npos)
      << e;
  o.tuning = {{"GEMM_WI_N", 5}};
  e = error_of([&] { Linear::create(context(), w, kNvW4A16, o); });
  EXPECT_NE(e.find("GEMM_WI_N = 5 is outside 1..4"), std::string::npos) << e;
  o.tuning = {{"FP4CL_VEC", 12}};
  e = error_of([&] { Linear::create(context(), w, kNvW4A16, o); });
  EXPECT_NE(e.find("FP4CL_VEC = 12 is not a supported vector width (8 or 16)"), std::string::npos) << e;
  o.tuning = {{"GEMM_TILE_Q", 4}};
  e = error_of([&] { Linear::create(context(), w, kNvW4A16, o); });
  EXPECT_NE(e.find("unknown parameter 'GEMM_TILE_Q'"), std::string::npos) << e;
  EXPECT_NE(e.find("GEMV_TOKENS"), std::string::npos) << e;
}

TEST(LinearApi, TuningParametersChangeNothingButSpeed) {
  for (const QuantScheme& scheme : {kNvW4A16, kMxW4A4}) {
    const Fp4Weight w = test::random_weight(scheme.weight, 100, 640, 8);
    const std::vector<std::uint16_t> x = test::random_activations(37, 640, 9);
    // Odd sizes on purpose: tiles that do not divide m, n or k, several work-items per group.
    for (const auto& [kernel, tuning] : std::vector<std::pair<std::string, std::map<std::string, long long>>>{
             {"gemm_tiled",
              {{"GEMM_TILE_M", 6}, {"GEMM_TILE_N", 32}, {"GEMM_TILE_K", 64}, {"GEMM_WI_M", 3}, {"GEMM_WI_N", 1},
               {"FP4CL_VEC", 8}}},
             {"gemm_tiled",
              {{"GEMM_TILE_M", 6}, {"GEMM_TILE_N", 48}, {"GEMM_TILE_K", 128}, {"GEMM_WI_M", 2}, {"GEMM_WI_N", 3},
               {"FP4CL_VEC", 16}}},
             {"gemm_tiled",
              {{"GEMM_TILE_M", 8}, {"GEMM_TILE_N", 32}, {"GEMM_TILE_K", 64}, {"GEMM_WI_M", 4}, {"GEMM_WI_N", 2},
               {"FP4CL_VEC", 8}}},
             {"gemv_rows", {{"GEMV_TOKENS", 3}, {"GEMV_LOCAL", 7}, {"FP4CL_VEC", 8}, {"GEMV_DECODE_LUT", 0}}},
             {"gemv_rows", {{"GEMV_TOKENS", 5}, {"GEMV_LOCAL", 2}, {"FP4CL_VEC", 16}, {"GEMV_DECODE_LUT", 1}}},
             {"gemv_lanes", {{"LANES_TOKENS", 3}, {"LANES_LOCAL", 7}}},
             {"gemv_words", {{"WORDS_TOKENS", 3}, {"WORDS_LOCAL", 7}}},
             {"gemv_words", {{"WORDS_TOKENS", 5}, {"WORDS_LOCAL", 2}}},
             {"gemv_words", {{"WORDS_TOKENS", 2}, {"WORDS_LOCAL", 3}, {"WORDS_PREFETCH", 0}}},
             {"gemv_words", {{"WORDS_TOKENS", 4}, {"WORDS_LOCAL", 1}, {"WORDS_PREFETCH", 5}}},
             {"gemv_int", {{"INT_TOKENS", 5}, {"INT_LOCAL", 3}}},
             {"gemv_int", {{"INT_TOKENS", 2}, {"INT_LOCAL", 1}, {"INT_PREFETCH", 3}}}}) {
      if (!test::kernel_serves(kernel, scheme)) continue;  // gemv_int: W4A4 only
      LinearOptions o = options_for(kernel, OutputType::fp32, 37);
      o.tuning = tuning;
      std::vector<float> y;
      Linear layer = Linear::create(context(), w, scheme, o);
      for (std::int64_t m : {std::int64_t{1}, std::int64_t{2}, std::int64_t{37}}) {
        const std::vector<std::uint16_t> xm(x.begin(), x.begin() + m * 640);
        layer.run(xm, m, y);
        test::check_against_reference(scheme, w, xm, m, {}, test::as_doubles(y), false, layer.describe());
      }
    }
  }
}

// ---------------------------------------------------------------- argument errors

struct BadWeight {
  const char* what;
  QuantScheme scheme;
  void (*edit)(Fp4Weight&);
  const char* expected;
};

TEST(LinearApi, InvalidWeightsAreRefusedWithClearErrors) {
  const BadWeight cases[] = {
      {"format mismatch", kMxW4A16, [](Fp4Weight&) {}, "the weight is NVFP4 but the scheme is MXFP4 W4A16"},
      {"k not a block multiple", kNvW4A16, [](Fp4Weight& w) { w.k = 24; }, "multiple of its block size 16"},
      {"n zero", kNvW4A16, [](Fp4Weight& w) { w.n = 0; }, "at least one output feature"},
      {"packed size", kNvW4A16, [](Fp4Weight& w) { w.packed.pop_back(); }, "Fp4Weight::packed has"},
      {"scales size", kNvW4A16, [](Fp4Weight& w) { w.scales.push_back(1); }, "Fp4Weight::scales has"},
      {"NaN scale", kNvW4A16, [](Fp4Weight& w) { w.scales[16] = 0x7F; }, "row 1, block 6 is 0x7F, a NaN in E4M3"},
      {"negative NaN scale", kNvW4A16, [](Fp4Weight& w) { w.scales[0] = 0xFF; }, "row 0, block 0 is 0xFF"},
      {"zero global scale", kNvW4A16, [](Fp4Weight& w) { w.global_scale = 0.0f; }, "global_scale = 0"},
      {"negative global scale", kNvW4A16, [](Fp4Weight& w) { w.global_scale = -1.0f; }, "positive finite"},
      {"NaN global scale", kNvW4A16, [](Fp4Weight& w) { w.global_scale = std::nanf(""); }, "global_scale = nan"},
      {"Inf global scale", kNvW4A16, [](Fp4Weight& w) { w.global_scale = INFINITY; }, "global_scale = inf"},
      {"zero input scale", kNvW4A4, [](Fp4Weight& w) { w.input_global_scale = 0.0f; }, "input_global_scale = 0"},
      {"Inf input scale", kNvW4A4, [](Fp4Weight& w) { w.input_global_scale = INFINITY; }, "(quant direction)"},
      {"zero dequant input scale", kNvW4A4, [](Fp4Weight& w) { w.input_scale = 0.0f; }, "input_scale = 0"},
      {"input scales not reciprocals", kNvW4A4, [](Fp4Weight& w) { w.input_global_scale = 448.0f; },
       "are not reciprocals"},
      {"overflowing alpha", kNvW4A4,
       [](Fp4Weight& w) {
         w.global_scale = 1e30f;
         w.set_input_scales_from_quant(1e-30f);  // alpha = input_scale 1e30 × global_scale 1e30
       },
       "not a normal fp32 number"},
  };
  for (const BadWeight& c : cases) {
    Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 4, 160, 1);
    for (auto& s : w.scales) s &= 0x7F;  // no accidental NaN
    c.edit(w);
    const std::string e = error_of([&] { Linear::create(context(), w, c.scheme, {}); });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.what << ": " << e;
  }
}

TEST(LinearApi, InvalidMxfp4WeightsAreRefused) {
  Fp4Weight w = test::random_weight(WeightFormat::mxfp4, 4, 96, 1);
  EXPECT_NE(error_of([&] { Fp4Weight v = w; v.k = 48; Linear::create(context(), v, kMxW4A16, {}); })
                .find("multiple of its block size 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Fp4Weight v = w; v.scales[5] = 0xFF; Linear::create(context(), v, kMxW4A16, {}); })
                .find("row 1, block 2 is 0xFF, a NaN in E8M0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Fp4Weight v = w; v.global_scale = 2.0f; Linear::create(context(), v, kMxW4A16, {}); })
                .find("MXFP4 has no global scale"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Fp4Weight v = w; v.input_global_scale = 0.5f; Linear::create(context(), v, kMxW4A4, {}); })
                .find("MXFP4 activations have no global scale"),
            std::string::npos);
  // Nonzero blocks 2^126 apart cannot share fp32 kernels; an all-zero block at E = 0 is fine.
  Fp4Weight span = w;
  std::fill(span.scales.begin(), span.scales.end(), std::uint8_t{127});
  span.scales[0] = 1;
  span.scales[1] = 127 + 126 - 1 + 1;  // 2^126 vs 2^-126
  EXPECT_NE(error_of([&] { Linear::create(context(), span, kMxW4A16, {}); }).find("more than 2^125 apart"),
            std::string::npos);
  Fp4Weight zero_block = w;
  std::fill(zero_block.packed.begin(), zero_block.packed.begin() + 16, std::uint8_t{0x88});  // block 0: ±0 codes
  zero_block.scales[0] = 0;
  zero_block.scales[1] = 200;
  const std::vector<std::uint16_t> x = test::random_activations(3, 96, 2);
  std::vector<float> y;
  Linear::create(context(), zero_block, kMxW4A16, options_for("", OutputType::fp32, 3)).run(x, 3, y);
  test::check_against_reference(kMxW4A16, zero_block, x, 3, {}, test::as_doubles(y), false, "zero block at E = 0");
}

TEST(LinearApi, InvalidOptionsAreRefused) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 4, 64, 1);
  LinearOptions o;
  o.max_tokens = 0;
  EXPECT_NE(error_of([&] { Linear::create(context(), w, kNvW4A16, o); }).find("max_tokens = 0: must be in 1 .. 2^31-1"), std::string::npos);
  o = {};
  o.bias = {1.0f, 2.0f};
  EXPECT_NE(error_of([&] { Linear::create(context(), w, kNvW4A16, o); }).find("bias has 2 values; the layer has n = 4"),
            std::string::npos);
  o = {};
  o.max_tokens = std::int64_t{1} << 30;  // 2^30 tokens × 64 floats: far beyond one buffer
  EXPECT_NE(error_of([&] { Linear::create(context(), w, kNvW4A16, o); }).find("byte workspace"), std::string::npos);
  o = {};
  o.decode_max_tokens = -1;
  EXPECT_NE(error_of([&] { Linear::create(context(), w, kNvW4A16, o); }).find("decode_max_tokens = -1"),
            std::string::npos);
}

TEST(LinearApi, InvalidCallsAreRefused) {
  const Fp4Weight w = test::random_weight(WeightFormat::nvfp4, 40, 64, 1);
  Linear layer = Linear::create(context(), w, kNvW4A16, options_for("", OutputType::bf16, 8));
  const cl::Buffer x = device_buffer(8 * 64 * 2), y = device_buffer(8 * 40 * 2), small = device_buffer(100);
  // More tokens than max_tokens run in chunks (tests/faults/limits_test.cpp); the buffers must
  // still hold them all.
  EXPECT_NE(error_of([&] { layer.enqueue(x, y, 9); }).find("the x buffer has 1024 bytes; 9 tokens × k = 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(x, y, -1); }).find("m = -1"), std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(small, y, 2); }).find("the x buffer has 100 bytes; 2 tokens × k = 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(x, small, 2); }).find("the y buffer has 100 bytes; 2 tokens × n = 40"),
            std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(x, x, 1); }).find("x and y are the same buffer"), std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(cl::Buffer(), y, 1); }).find("the x buffer is null"), std::string::npos);
  const cl::Context other(context().device());  // another OpenCL context on the same device
  const cl::Buffer foreign(other, CL_MEM_READ_WRITE, 8 * 64 * 2);
  EXPECT_NE(error_of([&] { layer.enqueue(foreign, y, 1); }).find("Linear: the x buffer belongs to another OpenCL context"),
            std::string::npos);
  EXPECT_NE(error_of([&] { layer.enqueue(x, foreign, 1); }).find("the y buffer belongs to another OpenCL context"),
            std::string::npos);
  std::vector<float> wrong_type;
  std::vector<std::uint16_t> out;
  EXPECT_NE(error_of([&] { layer.run(std::vector<std::uint16_t>(64), 1, wrong_type); }).find("output type is BF16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { layer.run(std::vector<std::uint16_t>(63), 1, out); }).find("x has 63 values; m × k = 1 × 64"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { layer.run(std::vector<std::uint16_t>(9 * 64), 9, out); }), "(no error)");  // chunked
  EXPECT_EQ(out.size(), 9u * 40u);
}

}  // namespace
}  // namespace fp4cl
