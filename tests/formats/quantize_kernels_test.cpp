// kernels/quantize.cl through its launcher (fp4cl::Quantizer) against the host reference, bit
// for bit: many shapes, random and adversarial data, both scale layouts, several global scales;
// dequantization to FP32 and BF16; the swizzled padding; argument errors; events.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bf16_test_data.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/quantize.hpp"
#include "support/errors.hpp"
#include "test_helpers.hpp"

namespace fp4cl {
namespace {

using test::bits_of;
using test::error_of;

constexpr std::uint8_t kPoison = 0xAB;  // fills output buffers so unwritten bytes show
constexpr std::size_t kGuard = 64;      // extra bytes after each output that must stay untouched


class QuantizeKernels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ctx_.emplace(Context::create());
    quantizer_.emplace(*ctx_);
  }
  static void TearDownTestSuite() {
    quantizer_.reset();
    ctx_.reset();
  }

  template <typename T>
  static cl::Buffer upload(const std::vector<T>& v, std::size_t extra_bytes = 0) {
    std::vector<std::uint8_t> bytes(v.size() * sizeof(T) + extra_bytes, kPoison);
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), v.size() * sizeof(T));
    return cl::Buffer(ctx_->opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                      std::max<std::size_t>(1, bytes.size()), bytes.data());
  }
  static cl::Buffer poisoned(std::size_t bytes) { return upload(std::vector<std::uint8_t>(bytes, kPoison)); }
  template <typename T>
  static std::vector<T> download(const cl::Buffer& b, std::size_t n) {
    std::vector<T> v(n);
    if (n != 0) {
      EXPECT_EQ(ctx_->queue().enqueueReadBuffer(b, CL_TRUE, 0, n * sizeof(T), v.data()), CL_SUCCESS);
    }
    return v;
  }

  struct DeviceResult {
    std::vector<std::uint8_t> packed, scales;  // with kGuard bytes after each
  };

  // Quantizes on the device, compares with the host reference (scales swizzled on the host for
  // the swizzled layout, padding included), then dequantizes on the device to FP32 and BF16 and
  // compares with the host dequantization.
  static void expect_bit_exact(WeightFormat format, ScaleLayout layout, std::int64_t rows, std::int64_t cols,
                               const std::vector<std::uint16_t>& x, float gs) {
    expect_bit_exact(*quantizer_, format, layout, rows, cols, x, gs);
  }
  static void expect_bit_exact(Quantizer& quantizer, WeightFormat format, ScaleLayout layout, std::int64_t rows,
                               std::int64_t cols, const std::vector<std::uint16_t>& x, float gs) {
    SCOPED_TRACE(::testing::Message() << to_string(format) << " " << to_string(layout) << " scales, [" << rows
                                      << ", " << cols << "], gs " << gs);
    const QuantizedRows ref = quantize(format, x, rows, cols, gs);
    const Fp4MatrixShape shape{format, layout, rows, cols};
    const std::vector<std::uint8_t> ref_scales =
        layout == ScaleLayout::linear ? ref.scales : swizzle_scales(ref.scales, rows, ref.scale_cols());

    const cl::Buffer input = upload(x);
    const auto packed_bytes = static_cast<std::size_t>(shape.packed_bytes());
    const auto scale_bytes = static_cast<std::size_t>(shape.scale_bytes());
    const cl::Buffer packed = poisoned(packed_bytes + kGuard), scales = poisoned(scale_bytes + kGuard);
    quantizer.quantize(shape, input, gs, packed, scales);
    const auto dev_packed = download<std::uint8_t>(packed, packed_bytes + kGuard);
    const auto dev_scales = download<std::uint8_t>(scales, scale_bytes + kGuard);
    for (std::size_t i = 0; i < packed_bytes; ++i)
      ASSERT_EQ(dev_packed[i], ref.packed[i]) << "packed byte " << i << " (row " << i / (packed_bytes / rows) << ")";
    for (std::size_t i = 0; i < scale_bytes; ++i) ASSERT_EQ(dev_scales[i], ref_scales[i]) << "scale byte " << i;
    for (std::size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(dev_packed[packed_bytes + i], kPoison) << "written past the packed output";
      ASSERT_EQ(dev_scales[scale_bytes + i], kPoison) << "written past the scales";
    }

    const std::vector<float> ref_w = dequantize(ref);
    const auto n = static_cast<std::size_t>(rows * cols);
    const cl::Buffer out_f32 = poisoned(4 * n + kGuard), out_bf16 = poisoned(2 * n + kGuard);
    quantizer.dequantize(shape, packed, scales, ref.global_scale, DequantizedType::f32, out_f32);
    quantizer.dequantize(shape, packed, scales, ref.global_scale, DequantizedType::bf16, out_bf16);
    const auto w32 = download<float>(out_f32, n);
    const auto w16 = download<std::uint16_t>(out_bf16, n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(w32[i]), bits_of(ref_w[i])) << "FP32 element " << i << ": " << w32[i] << " vs " << ref_w[i];
      ASSERT_EQ(w16[i], float_to_bf16(ref_w[i])) << "BF16 element " << i;
    }
    const auto tail32 = download<std::uint8_t>(out_f32, 4 * n + kGuard), tail16 = download<std::uint8_t>(out_bf16, 2 * n + kGuard);
    for (std::size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(tail32[4 * n + i], kPoison) << "written past the FP32 output";
      ASSERT_EQ(tail16[2 * n + i], kPoison) << "written past the BF16 output";
    }
  }

  static std::optional<Context> ctx_;
  static std::optional<Quantizer> quantizer_;
};
std::optional<Context> QuantizeKernels::ctx_;
std::optional<Quantizer> QuantizeKernels::quantizer_;

float tensor_gs(const std::vector<std::uint16_t>& x) {  // 448·6 / amax, the usual calibration
  float amax = 0;
  for (const std::uint16_t v : x) {
    const float a = std::fabs(bf16_to_float(v));
    if (std::isfinite(a) && a > amax) amax = a;
  }
  return amax > 0 ? 448.0f * 6.0f / amax : 1.0f;
}

void for_each_shape(WeightFormat format, const std::function<void(std::int64_t, std::int64_t, int)>& f) {
  const std::int64_t ms[] = {1, 7, 128, 333};
  const std::int64_t ks[] = {16, 32, 48, 64, 96, 1024, 2880, 8192};
  int index = 0;
  for (const std::int64_t m : ms) {
    for (const std::int64_t k : ks) {
      if (k % block_size(format) != 0) continue;
      if (m * k > 1'000'000) continue;  // [333, 8192] adds time, not coverage
      f(m, k, index++);
    }
  }
}

TEST_F(QuantizeKernels, WorkedExampleOfTheSpec) {
  std::vector<std::uint16_t> x(16, 0);
  x[0] = test::bf16(3.0f);
  x[1] = test::bf16(-1.296875f);
  x[2] = test::bf16(0.1298828125f);
  x[3] = test::bf16(0.125f);
  for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled}) {
    const Fp4MatrixShape shape{WeightFormat::nvfp4, layout, 1, 16};
    const cl::Buffer input = upload(x), packed = poisoned(8), scales = poisoned(static_cast<std::size_t>(shape.scale_bytes()));
    const cl::Buffer out = poisoned(16 * 4);
    quantizer_->quantize(shape, input, 1.0f, packed, scales);
    quantizer_->dequantize(shape, packed, scales, 1.0f, DequantizedType::f32, out);
    const auto p = download<std::uint8_t>(packed, 8);
    EXPECT_EQ(p, (std::vector<std::uint8_t>{0xD7, 0x01, 0, 0, 0, 0, 0, 0})) << to_string(layout);
    EXPECT_EQ(download<std::uint8_t>(scales, 1)[0], 0x30) << to_string(layout);  // (0, 0) is byte 0 in both layouts
    const auto w = download<float>(out, 4);
    EXPECT_EQ(w, (std::vector<float>{3.0f, -1.5f, 0.25f, 0.0f})) << to_string(layout);
  }
}

TEST_F(QuantizeKernels, Nvfp4RandomDataManyShapes) {
  for_each_shape(WeightFormat::nvfp4, [](std::int64_t m, std::int64_t k, int i) {
    const auto x = test::random_bf16(m, k, static_cast<std::uint32_t>(100 + i));
    const float gs = i % 3 == 0 ? 1.0f : (i % 3 == 1 ? tensor_gs(x) : 0.37f);
    expect_bit_exact(WeightFormat::nvfp4, i % 2 ? ScaleLayout::swizzled : ScaleLayout::linear, m, k, x, gs);
  });
}

TEST_F(QuantizeKernels, Mxfp4RandomDataManyShapes) {
  for_each_shape(WeightFormat::mxfp4, [](std::int64_t m, std::int64_t k, int i) {
    const auto x = test::random_bf16(m, k, static_cast<std::uint32_t>(200 + i));
    expect_bit_exact(WeightFormat::mxfp4, i % 2 ? ScaleLayout::swizzled : ScaleLayout::linear, m, k, x, 1.0f);
  });
}

TEST_F(QuantizeKernels, AdversarialDataBothLayouts) {
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled}) {
      for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{7, 96}, {37, 2880}, {130, 64}}) {
        const auto seed = static_cast<std::uint32_t>(m * k);
        const auto adversarial = test::adversarial_bf16(m, k, block_size(format), seed);
        const auto bits = test::random_bits(m, k, seed + 1);
        if (format == WeightFormat::mxfp4) {
          expect_bit_exact(format, layout, m, k, adversarial, 1.0f);
          expect_bit_exact(format, layout, m, k, bits, 1.0f);
          continue;
        }
        for (const float gs : {1.0f, 0.37f, 1000.0f, 1e30f, 1e-30f}) {
          expect_bit_exact(format, layout, m, k, adversarial, gs);
          expect_bit_exact(format, layout, m, k, bits, gs);
        }
      }
    }
  }
}

TEST_F(QuantizeKernels, EveryBf16BlockMaximum) {
  // Block b has the maximum magnitude BF16 pattern b (every non-negative non-NaN pattern), the
  // other elements fractions of it with random signs: every scale the recipes can choose.
  std::mt19937 rng(29);
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
    const int block = block_size(format);
    const std::int64_t cols = 64 * block, rows = (0x7F81 + 63) / 64;
    std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * cols), 0);
    for (std::uint32_t b = 0; b < 0x7F81; ++b) {
      const float amax = bf16_to_float(static_cast<std::uint16_t>(b));
      for (int i = 0; i < block; ++i) {
        const float v = i == static_cast<int>(b % static_cast<std::uint32_t>(block))
                            ? amax
                            : amax * static_cast<float>(rng() % 1000) / 1000.0f * ((rng() & 1) ? -1.0f : 1.0f);
        x[b * static_cast<std::size_t>(block) + static_cast<std::size_t>(i)] = test::bf16(v);
      }
    }
    if (format == WeightFormat::mxfp4) {
      expect_bit_exact(format, ScaleLayout::linear, rows, cols, x, 1.0f);
    } else {
      for (const float gs : {1.0f, 0.37f, 2688.0f}) expect_bit_exact(format, ScaleLayout::linear, rows, cols, x, gs);
    }
  }
}

TEST_F(QuantizeKernels, OtherWorkSplitsGiveTheSameBits) {
  // Work-items of 16 blocks (the default is 64 on CPUs, 8 on GPUs) in 3 × 2 work-groups: groups of
  // 8 blocks and the single blocks at a row's end fall at other places, the global size is rounded
  // up in both dimensions.
  {
    Quantizer quantizer(*ctx_, QuantizerOptions{{3, 2}, 16});
    for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4}) {
      for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled}) {
        for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{7, 96}, {130, 2880}, {3, 1024}}) {
          const auto x = test::adversarial_bf16(m, k, block_size(format), static_cast<std::uint32_t>(m + k));
          expect_bit_exact(quantizer, format, layout, m, k, x, format == WeightFormat::nvfp4 ? 0.37f : 1.0f);
        }
      }
    }
  }
}

TEST_F(QuantizeKernels, EveryBf16UpToSixPassesThroughTheE2M1Encoder) {
  // MXFP4 blocks of [6.0, 31 test values]: the block maximum 6 gives a multiplier of exactly 1,
  // so the kernel's codes are E2M1 encodings of the BF16 values themselves. NaN values do not
  // change the block maximum and are included.
  std::vector<std::uint16_t> values;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(v) || std::fabs(v) <= 6.0f) values.push_back(static_cast<std::uint16_t>(b));
  }
  std::vector<std::uint16_t> x;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (x.size() % 32 == 0) x.push_back(test::bf16(6.0f));
    x.push_back(values[i]);
  }
  while (x.size() % 32 != 0) x.push_back(0);
  const auto cols = static_cast<std::int64_t>(x.size());
  const Fp4MatrixShape shape{WeightFormat::mxfp4, ScaleLayout::linear, 1, cols};
  const cl::Buffer input = upload(x), packed = poisoned(x.size() / 2), scales = poisoned(x.size() / 32);
  quantizer_->quantize(shape, input, 1.0f, packed, scales);
  const auto p = download<std::uint8_t>(packed, x.size() / 2);
  for (const std::uint8_t s : download<std::uint8_t>(scales, x.size() / 32)) ASSERT_EQ(s, 127);
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(fp4_code_at(p.data(), static_cast<std::int64_t>(i)), float_to_e2m1(bf16_to_float(x[i])))
        << "bf16 0x" << std::hex << x[i];
  expect_bit_exact(WeightFormat::mxfp4, ScaleLayout::swizzled, 1, cols, x, 1.0f);
}

TEST_F(QuantizeKernels, SwizzledPaddingIsZeroedByTheKernel) {
  // [7, 48] NVFP4: 3 scale columns padded to 4, 7 rows padded to 128: 512 bytes, 21 of them scales.
  const auto x = test::random_bf16(7, 48, 5);
  const Fp4MatrixShape shape{WeightFormat::nvfp4, ScaleLayout::swizzled, 7, 48};
  ASSERT_EQ(shape.scale_bytes(), 512);
  const cl::Buffer input = upload(x), packed = poisoned(7 * 24), scales = poisoned(512);
  quantizer_->quantize(shape, input, 1.0f, packed, scales);
  const auto s = download<std::uint8_t>(scales, 512);
  int padding = 0;
  for (std::int64_t b = 0; b < 512; ++b) {
    const ScalePosition pos = swizzled_scale_position(b, 4);
    if (pos.row >= 7 || pos.col >= 3) {
      ++padding;
      ASSERT_EQ(s[static_cast<std::size_t>(b)], 0) << "padding byte " << b;
    }
  }
  EXPECT_EQ(padding, 512 - 21);
}


TEST_F(QuantizeKernels, RejectsBadArguments) {
  const cl::Buffer big = poisoned(1 << 16), big2 = poisoned(1 << 16), big3 = poisoned(1 << 16), small = poisoned(8);
  const Fp4MatrixShape nv{WeightFormat::nvfp4, ScaleLayout::linear, 4, 64};
  auto q = [&](const Fp4MatrixShape& s, const cl::Buffer& in, float gs, const cl::Buffer& p, const cl::Buffer& sc) {
    return error_of([&] { quantizer_->quantize(s, in, gs, p, sc); });
  };
  EXPECT_NE(q({WeightFormat::nvfp4, ScaleLayout::linear, 4, 40}, big, 1, big2, big3).find("cols (K) = 40"), std::string::npos);
  EXPECT_NE(q({WeightFormat::mxfp4, ScaleLayout::swizzled, 4, 48}, big, 1, big2, big3).find("block size 32"), std::string::npos);
  EXPECT_NE(q(nv, small, 1, big2, big3).find("BF16 input buffer has 8 bytes"), std::string::npos);
  EXPECT_NE(q(nv, big, 1, small, big3).find("packed buffer"), std::string::npos);
  EXPECT_NE(q({WeightFormat::nvfp4, ScaleLayout::swizzled, 4, 64}, big, 1, big2, small).find("scales buffer has 8 bytes"),
            std::string::npos);
  EXPECT_NE(q(nv, big, 0.0f, big2, big3).find("gs_quant"), std::string::npos);
  EXPECT_NE(q(nv, big, std::numeric_limits<float>::quiet_NaN(), big2, big3).find("gs_quant"), std::string::npos);
  EXPECT_NE(q({WeightFormat::mxfp4, ScaleLayout::linear, 4, 64}, big, 2.0f, big2, big3).find("MXFP4 has no global scale"),
            std::string::npos);
  EXPECT_NE(q(nv, big, 1, big2, big2).find("same buffer"), std::string::npos);
  EXPECT_NE(q(nv, cl::Buffer(), 1, big2, big3).find("null"), std::string::npos);
  const cl::Context other(ctx_->device());  // another OpenCL context on the same device
  const cl::Buffer foreign(other, CL_MEM_READ_WRITE, 1 << 16);
  EXPECT_NE(q(nv, foreign, 1, big2, big3).find("Quantizer::quantize: the BF16 input buffer belongs to another OpenCL context"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quantizer_->dequantize(nv, big2, big3, 1.0f, DequantizedType::f32, foreign); })
                .find("the output buffer belongs to another OpenCL context"),
            std::string::npos);
  EXPECT_NE(q({WeightFormat::nvfp4, ScaleLayout::linear, -1, 64}, big, 1, big2, big3).find("negative"), std::string::npos);
  const std::string d = error_of([&] {
    quantizer_->dequantize(nv, big2, big3, 1.0f, DequantizedType::f32, small);
  });
  EXPECT_NE(d.find("output buffer has 8 bytes"), std::string::npos) << d;
  EXPECT_NE(error_of([&] { quantizer_->dequantize(nv, big2, big3, -1.0f, DequantizedType::bf16, big); }).find("gs_dequant"),
            std::string::npos);
}

TEST_F(QuantizeKernels, EventsOrderLaunchesAndCarryProfilingTimes) {
  const auto x = test::random_bf16(64, 256, 8);
  const Fp4MatrixShape shape{WeightFormat::nvfp4, ScaleLayout::swizzled, 64, 256};
  const cl::Buffer input = upload(x), packed = poisoned(64 * 128), scales = poisoned(static_cast<std::size_t>(shape.scale_bytes()));
  const cl::Buffer out = poisoned(64 * 256 * 4);
  const cl::Event quantized = quantizer_->quantize(shape, input, 1.0f, packed, scales);
  const cl::Event dequantized = quantizer_->dequantize(shape, packed, scales, 1.0f, DequantizedType::f32, out, {quantized});
  ASSERT_EQ(dequantized.wait(), CL_SUCCESS);
  cl_int status = 0;
  ASSERT_EQ(quantized.getInfo(CL_EVENT_COMMAND_EXECUTION_STATUS, &status), CL_SUCCESS);
  EXPECT_EQ(status, CL_COMPLETE);
  if (ctx_->profiling_enabled()) {
    cl_ulong start = 0, end = 0;
    ASSERT_EQ(dequantized.getProfilingInfo(CL_PROFILING_COMMAND_START, &start), CL_SUCCESS);
    ASSERT_EQ(dequantized.getProfilingInfo(CL_PROFILING_COMMAND_END, &end), CL_SUCCESS);
    EXPECT_LE(start, end);
  }
  const auto w = download<float>(out, x.size());
  const auto ref = dequantize(quantize_nvfp4(x, 64, 256, 1.0f));
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_EQ(bits_of(w[i]), bits_of(ref[i])) << i;
  // An empty matrix enqueues a marker that still honours the wait list.
  const Fp4MatrixShape empty{WeightFormat::mxfp4, ScaleLayout::swizzled, 0, 64};
  const cl::Event marker = quantizer_->quantize(empty, input, 1.0f, packed, scales, {dequantized});
  EXPECT_EQ(marker.wait(), CL_SUCCESS);
}

}  // namespace
}  // namespace fp4cl
