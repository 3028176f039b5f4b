// The activation pre-pass (kernels/linear_activations.cl) bit for bit against the host: W4A16
// rows are the BF16 values split even/odd; W4A4 rows are the contract recipe's FP4 values times
// their block scales (the scalar reference's quantize_activations), including rounding ties,
// zero blocks, saturation, subnormal and huge inputs, NaN and infinities. The integer form (for
// the integer GEMV) holds the same quantization as codes 2·e2m1 and block scales, the BF16 row
// form (gemv_words' BF16 dot products) the same values as BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/formats.cl"
#include "kernels/linear_activation_pass.hpp"
#include "linear/linear_test_data.hpp"
#include "linear/linear_test_support.hpp"
#include "prepare/fp4_row_layout.hpp"
#include "reference/linear_reference.hpp"

namespace fp4cl {
namespace {

std::uint16_t bf16(float f) { return static_cast<std::uint16_t>(float_to_bf16(f)); }

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Rows with the cases that matter for the recipes, then random values; k = 208 (not a multiple
// of 64: the last step is partly padding).
std::vector<std::uint16_t> special_rows(std::int64_t k) {
  std::vector<float> row0 = {3.0f, -1.296875f, 0.1298828125f, 0.125f};  // FP4.md §8 (first block)
  row0.resize(16, 0.0f);
  // Exact E2M1 ties after scaling by 1 (amax 6 → multiplier 1 under gs = 448): 0.25, 0.75, ...
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f,
                  -5.0f, -6.0f})
    row0.push_back(t);
  row0.resize(64, 0.0f);  // an all-zero block (48..63)
  for (float v : {1e-38f, 2e-39f, -3e-40f, 1e38f, -3e38f, 65504.0f, 1e-3f, -0.0f, 0.0f, 7.0f, 100.0f, -0.001f, 1.0f,
                  2.0f, 4.0f, 8.0f})
    row0.push_back(v);
  std::vector<std::uint16_t> x = test::random_activations(3, k, 17);
  for (std::size_t i = 0; i < row0.size() && i < static_cast<std::size_t>(k); ++i) x[i] = bf16(row0[i]);
  // Token 2: NaN and infinities in one block each.
  x[static_cast<std::size_t>(2 * k + 3)] = 0x7FC0;
  x[static_cast<std::size_t>(2 * k + 35)] = 0x7F80;
  x[static_cast<std::size_t>(2 * k + 70)] = 0xFF80;
  return x;
}

// The pass's output for x (m tokens) as raw floats [m, kpad].
std::vector<float> run_pass(const QuantScheme& scheme, const std::vector<std::uint16_t>& x, std::int64_t m,
                            std::int64_t k, float gs) {
  Context& ctx = test::context();
  const std::int64_t kpad = (k + kFp4RowStep - 1) / kFp4RowStep * kFp4RowStep;
  LinearActivationPass pass;
  pass.prepare(ctx, scheme, k, kpad, gs, m);
  cl_int err = CL_SUCCESS;
  cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                const_cast<std::uint16_t*>(x.data()), &err);
  EXPECT_EQ(err, CL_SUCCESS);
  cl::Buffer ws(ctx.opencl_context(), CL_MEM_READ_WRITE, pass.workspace_bytes(), nullptr, &err);
  EXPECT_EQ(err, CL_SUCCESS);
  std::vector<float> out(static_cast<std::size_t>(m * kpad), -1.0f);
  const std::vector<cl::Event> wait{pass.enqueue(ctx, xb, ws, m, nullptr)};
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, 0, out.size() * 4, out.data(), &wait), CL_SUCCESS);
  return out;
}

// Element j of token i in a split row.
float split_at(const std::vector<float>& out, std::int64_t kpad, std::int64_t i, std::int64_t j) {
  const std::int64_t pos = (j % 2 == 0) ? j / 2 : kpad / 2 + j / 2;
  return out[static_cast<std::size_t>(i * kpad + pos)];
}

void expect_pass_matches_host(WeightFormat format, bool w4a16, float gs) {
  const std::int64_t m = 3, k = format == WeightFormat::nvfp4 ? 208 : 224;
  const std::int64_t kpad = (k + 63) / 64 * 64;
  const QuantScheme scheme{format, w4a16 ? Activations::bf16 : Activations::fp4_dynamic};
  const std::vector<std::uint16_t> x = special_rows(k);
  const std::vector<float> out = run_pass(scheme, x, m, k, gs);
  const reference::QuantizedActivations q = reference::quantize_activations(format, x.data(), m, k, gs);
  int mismatches = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < kpad; ++j) {
      float expected = 0.0f;  // the pad past k
      if (j < k) {
        expected = w4a16 ? bf16_to_float(x[static_cast<std::size_t>(i * k + j)]) : static_cast<float>(q.value(i, j));
      }
      const float got = split_at(out, kpad, i, j);
      const bool same = bits(got) == bits(expected) || (std::isnan(got) && std::isnan(expected));
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << scheme.name() << " token " << i << " element " << j << ": device " << got << " (0x"
                      << std::hex << bits(got) << "), host " << expected << " (0x" << bits(expected) << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << scheme.name();
}

// The integer form: per token kpad int8 codes 2·e2m1 (element order, zeros past k), then per
// token kpad/16 chunk offsets -12 · (the sum of those codes), then per token kpad/16 chunk scales,
// against the host recipe's codes and scale bytes.
void expect_int_codes_match_host(WeightFormat format, float gs) {
  const std::int64_t m = 3, k = format == WeightFormat::nvfp4 ? 208 : 224;
  const std::int64_t kpad = (k + 63) / 64 * 64, block = block_size(format);
  const QuantScheme scheme{format, Activations::fp4_dynamic};
  const std::vector<std::uint16_t> x = special_rows(k);
  Context& ctx = test::context();
  LinearActivationPass pass;
  pass.prepare(ctx, scheme, k, kpad, gs, m, ActivationForm::int_codes);
  cl_int err = CL_SUCCESS;
  cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                const_cast<std::uint16_t*>(x.data()), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  cl::Buffer ws(ctx.opencl_context(), CL_MEM_READ_WRITE, pass.workspace_bytes(), nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(pass.chunk_offsets_offset(), static_cast<std::size_t>(m * kpad));
  ASSERT_EQ(pass.scales_offset(), static_cast<std::size_t>(m * kpad * 2));
  std::vector<std::int8_t> codes(static_cast<std::size_t>(m * kpad), -99);
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(m * kpad / 16), -9999);
  std::vector<float> scales(static_cast<std::size_t>(m * kpad / 16), -1.0f);
  const std::vector<cl::Event> wait{pass.enqueue(ctx, xb, ws, m, nullptr)};
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, 0, codes.size(), codes.data(), &wait), CL_SUCCESS);
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, pass.chunk_offsets_offset(), offsets.size() * 4, offsets.data()), CL_SUCCESS);
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, pass.scales_offset(), scales.size() * 4, scales.data()),
            CL_SUCCESS);
  const reference::QuantizedActivations q = reference::quantize_activations(format, x.data(), m, k, gs);
  const int twice[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  int mismatches = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < kpad; ++j) {
      int expected = 0;
      if (j < k) {
        const unsigned c = (q.packed[static_cast<std::size_t>((i * k + j) / 2)] >> (4 * (j % 2))) & 15u;
        expected = (c & 8u) ? -twice[c & 7u] : twice[c & 7u];
      }
      if (codes[static_cast<std::size_t>(i * kpad + j)] != expected && ++mismatches <= 5)
        ADD_FAILURE() << scheme.name() << " token " << i << " element " << j << ": code "
                      << int{codes[static_cast<std::size_t>(i * kpad + j)]} << ", host " << expected;
    }
    for (std::int64_t c = 0; c < kpad / 16; ++c) {
      int sum = 0;
      for (std::int64_t j = c * 16; j < c * 16 + 16; ++j) sum += codes[static_cast<std::size_t>(i * kpad + j)];
      if (offsets[static_cast<std::size_t>(i * (kpad / 16) + c)] != -12 * sum && ++mismatches <= 5)
        ADD_FAILURE() << scheme.name() << " token " << i << " chunk " << c << ": offset "
                      << offsets[static_cast<std::size_t>(i * (kpad / 16) + c)] << ", -12 × the codes' sum "
                      << -12 * sum;
    }
    for (std::int64_t c = 0; c < kpad / 16; ++c) {
      float expected = 0.0f;
      if (c * 16 < k) {
        const unsigned sb = q.scales[static_cast<std::size_t>(i * (k / block) + c * 16 / block)];
        expected = format == WeightFormat::nvfp4 ? e4m3_decode(sb) : e8m0_decode(sb);
      }
      const float got = scales[static_cast<std::size_t>(i * (kpad / 16) + c)];
      if (bits(got) != bits(expected) && ++mismatches <= 5)
        ADD_FAILURE() << scheme.name() << " token " << i << " chunk " << c << ": scale " << got << ", host " << expected;
    }
  }
  EXPECT_EQ(mismatches, 0) << scheme.name();
}

// The BF16 row form (gemv_words' BF16 dot products): per token k BF16 values in element order,
// the recipe's FP4 values times their block scales, which BF16 holds exactly: the host's values
// bit for bit (as BF16), NaN as NaN. Nothing is written past the m tokens' rows.
void expect_bf16_rows_match_host(WeightFormat format, float gs) {
  const std::int64_t m = 3, k = format == WeightFormat::nvfp4 ? 208 : 224;
  const std::int64_t kpad = (k + 63) / 64 * 64;
  const QuantScheme scheme{format, Activations::fp4_dynamic};
  const std::vector<std::uint16_t> x = special_rows(k);
  Context& ctx = test::context();
  LinearActivationPass pass;
  pass.prepare(ctx, scheme, k, kpad, gs, m + 1, ActivationForm::bf16_rows);
  ASSERT_EQ(pass.workspace_bytes(), static_cast<std::size_t>((m + 1) * k * 2));
  cl_int err = CL_SUCCESS;
  cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                const_cast<std::uint16_t*>(x.data()), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  std::vector<std::uint16_t> rows(static_cast<std::size_t>((m + 1) * k), 0xABCD);
  cl::Buffer ws(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, rows.size() * 2, rows.data(), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  const std::vector<cl::Event> wait{pass.enqueue(ctx, xb, ws, m, nullptr)};
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, 0, rows.size() * 2, rows.data(), &wait), CL_SUCCESS);
  const reference::QuantizedActivations q = reference::quantize_activations(format, x.data(), m, k, gs);
  int mismatches = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < k; ++j) {
      const float expected = static_cast<float>(q.value(i, j));
      ASSERT_EQ(bits(expected) & 0xFFFFu, 0u) << "the host value is not a BF16 number";
      const std::uint16_t got = rows[static_cast<std::size_t>(i * k + j)];
      const bool same = got == (bits(expected) >> 16) || (std::isnan(expected) && (got & 0x7F80u) == 0x7F80u &&
                                                          (got & 0x7Fu) != 0u);
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << scheme.name() << " token " << i << " element " << j << ": device 0x" << std::hex << got
                      << ", host " << expected << " (0x" << bits(expected) << std::dec << ")";
    }
  }
  for (std::int64_t j = 0; j < k; ++j) EXPECT_EQ(rows[static_cast<std::size_t>(m * k + j)], 0xABCD) << "past token m";
  EXPECT_EQ(mismatches, 0) << scheme.name();
}

// The integer planes (gemv_int under W4A16): per 16-element chunk, q = 128 · hi + lo (lo 0..127)
// is the element on the chunk's grid, x · 2^(14 - e) rounded to nearest even, 2^e the smallest
// power of two above the chunk's largest magnitude (at least 2^-125), computed here in doubles;
// the chunk offsets are -12 · Σq; the two factors are normal and multiply to 2^(e - 13); a chunk with NaN or
// an infinity has q = 0 and a NaN factor; zeros past K. The rows: special_rows (huge, tiny, denormal,
// NaN and infinite elements), and a token whose chunks hold elements 2^0 .. 2^10 below their
// largest with every significand (ties of each rounding step among them).
TEST(LinearActivationPass, IntegerPlanesHoldTheChunkGrid) {
  const std::int64_t m = 4, k = 208, kpad = 256, mt = m + 1;
  std::vector<std::uint16_t> x = special_rows(k);
  x.resize(static_cast<std::size_t>(m * k));
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t chunk = j / 16, e = j % 16;
    const unsigned exponent = e == 0 ? 130u : 130u - static_cast<unsigned>((chunk + e) % 11);
    const unsigned mantissa = static_cast<unsigned>(j * 37 + chunk) & 0x7Fu;
    x[static_cast<std::size_t>(3 * k + j)] =
        static_cast<std::uint16_t>(((j % 3 == 0) ? 0x8000u : 0u) | (exponent << 7) | mantissa);
  }
  Context& ctx = test::context();
  LinearActivationPass pass;
  pass.prepare(ctx, {WeightFormat::nvfp4, Activations::bf16}, k, kpad, 1.0f, mt, ActivationForm::int_planes);
  const std::size_t plane = static_cast<std::size_t>(mt * kpad);
  ASSERT_EQ(pass.workspace_bytes(), 4 * plane);
  cl_int err = CL_SUCCESS;
  cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2, x.data(), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  std::vector<std::uint8_t> out(4 * plane, 0x5A);
  cl::Buffer ws(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, out.size(), out.data(), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  const std::vector<cl::Event> wait{pass.enqueue(ctx, xb, ws, m, nullptr)};
  ASSERT_EQ(ctx.queue().enqueueReadBuffer(ws, CL_TRUE, 0, out.size(), out.data(), &wait), CL_SUCCESS);
  const auto hi = [&](std::int64_t i, std::int64_t j) {
    return static_cast<int>(static_cast<std::int8_t>(out[static_cast<std::size_t>(i * kpad + j)]));
  };
  const auto lo = [&](std::int64_t i, std::int64_t j) {
    return static_cast<int>(static_cast<std::int8_t>(out[3 * plane + static_cast<std::size_t>(i * kpad + j)]));
  };
  const auto sum = [&](std::int64_t i, std::int64_t c) {
    std::int32_t v;
    std::memcpy(&v, &out[plane + static_cast<std::size_t>(4 * (i * (kpad / 16) + c))], 4);
    return v;
  };
  const auto factor = [&](std::int64_t i, std::int64_t c, int which) {
    float v;
    std::memcpy(&v, &out[2 * plane + static_cast<std::size_t>(8 * (i * (kpad / 16) + c) + 4 * which)], 4);
    return v;
  };
  int mismatches = 0, rounded = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t c = 0; c < kpad / 16; ++c) {
      double largest = 0.0;
      bool finite = true;
      for (std::int64_t j = c * 16; j < c * 16 + 16 && j < k; ++j) {
        const double v = bf16_to_float(x[static_cast<std::size_t>(i * k + j)]);
        finite = finite && std::isfinite(v);
        largest = std::max(largest, std::fabs(v));
      }
      int e = 0;
      std::frexp(largest, &e);
      e = std::max(e, -125);
      std::int64_t expected_sum = 0;
      for (std::int64_t j = c * 16; j < c * 16 + 16; ++j) {
        double q = 0.0;
        if (j < k && finite) {
          const double v = bf16_to_float(x[static_cast<std::size_t>(i * k + j)]);
          q = std::nearbyint(std::ldexp(v, 14 - e));
          rounded += std::ldexp(q, e - 14) != v;
        }
        expected_sum += static_cast<std::int64_t>(q);
        const int l = lo(i, j);
        if ((128 * hi(i, j) + l != q || l < 0) && ++mismatches <= 5)
          ADD_FAILURE() << "token " << i << " element " << j << ": hi " << hi(i, j) << ", lo " << l << ", q " << q;
      }
      if (sum(i, c) != -12 * expected_sum && ++mismatches <= 5)
        ADD_FAILURE() << "token " << i << " chunk " << c << ": offset " << sum(i, c) << ", expected " << -12 * expected_sum;
      const float a = factor(i, c, 0), b = factor(i, c, 1);
      if (!finite) {
        EXPECT_TRUE(std::isnan(a)) << "token " << i << " chunk " << c;
      } else if (largest > 0.0) {  // (a zero chunk's factors multiply zeros)
        EXPECT_EQ(static_cast<double>(a) * static_cast<double>(b), std::ldexp(1.0, e - 13)) << i << " " << c;
        EXPECT_TRUE(std::isnormal(a) && std::isnormal(b)) << "token " << i << " chunk " << c << ": " << a << ", " << b;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(rounded, 50) << "the data should exercise the rounding";
  EXPECT_EQ(out[static_cast<std::size_t>(m * kpad)], 0x5A) << "past token m";
  test::expect_error([&] {
    pass.prepare(ctx, {WeightFormat::nvfp4, Activations::fp4_dynamic}, 64, 64, 1.0f, 1, ActivationForm::int_planes);
  }, {"integer activation planes are for BF16 activations (W4A16)"});
}

TEST(LinearActivationPass, Bf16RowsOfFp4ActivationsMatchTheRecipe) {
  expect_bf16_rows_match_host(WeightFormat::nvfp4, 448.0f);
  expect_bf16_rows_match_host(WeightFormat::nvfp4, 1234.5678f);
  expect_bf16_rows_match_host(WeightFormat::mxfp4, 1.0f);
  LinearActivationPass pass;
  test::expect_error([&] {
    pass.prepare(test::context(), {WeightFormat::nvfp4, Activations::bf16}, 64, 64, 1.0f, 1, ActivationForm::bf16_rows);
  }, {"BF16 activation rows from the pass need FP4 activations (W4A4)"});
}

TEST(LinearActivationPass, IntegerCodesMatchTheRecipe) {
  expect_int_codes_match_host(WeightFormat::nvfp4, 448.0f);
  expect_int_codes_match_host(WeightFormat::nvfp4, 1234.5678f);
  expect_int_codes_match_host(WeightFormat::mxfp4, 1.0f);
}

TEST(LinearActivationPass, IntegerCodesNeedFp4Activations) {
  LinearActivationPass pass;
  EXPECT_THROW(pass.prepare(test::context(), {WeightFormat::nvfp4, Activations::bf16}, 64, 64, 1.0f, 1,
                            ActivationForm::int_codes),
               Error);
}

TEST(LinearActivationPass, Bf16RowsAreSplitExactly) {
  expect_pass_matches_host(WeightFormat::nvfp4, true, 1.0f);
  expect_pass_matches_host(WeightFormat::mxfp4, true, 1.0f);
}

TEST(LinearActivationPass, Nvfp4RecipeIsBitExact) {
  expect_pass_matches_host(WeightFormat::nvfp4, false, 448.0f);  // ties land exactly on thresholds
  expect_pass_matches_host(WeightFormat::nvfp4, false, 1.0f);
  expect_pass_matches_host(WeightFormat::nvfp4, false, 1234.5678f);
}

TEST(LinearActivationPass, Mxfp4RecipeIsBitExact) { expect_pass_matches_host(WeightFormat::mxfp4, false, 1.0f); }

TEST(LinearActivationPass, SpecWorkedExample) {
  // FP4.md §8: gs = 1, the block [3.0, -1.296875, 0.1298828125, 0.125, 0...] dequantizes to
  // [3, -1.5, 0.25, 0] (codes 0x7, 0xD, 0x1, 0x0 with scale 0.5).
  std::vector<std::uint16_t> x(64, 0);
  x[0] = bf16(3.0f);
  x[1] = bf16(-1.296875f);
  x[2] = bf16(0.1298828125f);
  x[3] = bf16(0.125f);
  const std::vector<float> out = run_pass({WeightFormat::nvfp4, Activations::fp4_dynamic}, x, 1, 64, 1.0f);
  EXPECT_EQ(split_at(out, 64, 0, 0), 3.0f);
  EXPECT_EQ(split_at(out, 64, 0, 1), -1.5f);
  EXPECT_EQ(split_at(out, 64, 0, 2), 0.25f);
  EXPECT_EQ(split_at(out, 64, 0, 3), 0.0f);
}

}  // namespace
}  // namespace fp4cl
