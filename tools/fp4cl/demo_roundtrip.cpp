#include "demo_roundtrip.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fp4cl/formats.hpp"
#include "fp4cl/quantize.hpp"
#include "support/check.hpp"
#include "timing.hpp"

namespace fp4cl::cli {

namespace {

std::vector<std::uint16_t> gaussian_bf16(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = float_to_bf16(normal(rng));
  return x;
}

template <typename T>
cl::Buffer device_buffer(const Context& ctx, std::size_t count, const T* data = nullptr) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0),
               std::max<std::size_t>(1, count * sizeof(T)), const_cast<T*>(data), &err);
  check_cl(err, "allocating a {} MiB buffer", count * sizeof(T) >> 20);
  return b;
}

template <typename T>
std::vector<T> read_back(const Context& ctx, const cl::Buffer& b, std::size_t count) {
  std::vector<T> v(count);
  check_cl(ctx.queue().enqueueReadBuffer(b, CL_TRUE, 0, count * sizeof(T), v.data()), "reading a result back");
  return v;
}

// Median kernel time in milliseconds over `runs` launches, after two warm-up launches.
double median_ms(const Context& ctx, int runs, const std::function<cl::Event()>& launch) {
  return median_microseconds(ctx, 2, runs, [&] { return std::vector<cl::Event>{launch()}; }) * 1e-3;
}

// Counts the positions where two byte vectors differ, printing the first one.
std::size_t mismatches(const std::vector<std::uint8_t>& device, const std::vector<std::uint8_t>& host,
                       const char* what) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (device[i] == host[i]) continue;
    if (count++ == 0)
      fmt::print("  MISMATCH {} byte {}: device 0x{:02x}, host 0x{:02x}\n", what, i, device[i], host[i]);
  }
  return count;
}

// Runs one format; returns false when the device disagrees with the host reference.
bool demo_format(const Context& ctx, Quantizer& quantizer, WeightFormat format, const RoundTripOptions& o,
                 const std::vector<std::uint16_t>& x, const cl::Buffer& input) {
  const std::int64_t rows = o.rows, cols = o.cols, n = rows * cols;
  float gs = 1.0f;
  if (format == WeightFormat::nvfp4) {  // the usual per-tensor calibration: gs_q = 448·6 / amax
    float amax = 0.0f;
    for (const std::uint16_t v : x) amax = std::max(amax, std::fabs(bf16_to_float(v)));
    gs = amax > 0.0f ? 448.0f * 6.0f / amax : 1.0f;
    fmt::print("{} (block 16, E4M3 scales, gs_q = {:.6g}):\n", to_string(format), gs);
  } else {
    fmt::print("{} (block 32, E8M0 scales):\n", to_string(format));
  }
  const QuantizedRows ref = quantize(format, x, rows, cols, gs);
  const std::vector<float> ref_w = dequantize(ref);

  const Fp4MatrixShape linear{format, ScaleLayout::linear, rows, cols};
  const Fp4MatrixShape swizzled{format, ScaleLayout::swizzled, rows, cols};
  const auto packed_bytes = static_cast<std::size_t>(linear.packed_bytes());
  const cl::Buffer packed = device_buffer<std::uint8_t>(ctx, packed_bytes);
  const cl::Buffer scales = device_buffer<std::uint8_t>(ctx, static_cast<std::size_t>(linear.scale_bytes()));
  const cl::Buffer sw_scales = device_buffer<std::uint8_t>(ctx, static_cast<std::size_t>(swizzled.scale_bytes()));
  const cl::Buffer out_f32 = device_buffer<float>(ctx, static_cast<std::size_t>(n));
  const cl::Buffer out_bf16 = device_buffer<std::uint16_t>(ctx, static_cast<std::size_t>(n));

  // Bit-exactness: both layouts, both dequantized types.
  std::size_t bad = 0;
  quantizer.quantize(swizzled, input, gs, packed, sw_scales);
  bad += mismatches(read_back<std::uint8_t>(ctx, sw_scales, static_cast<std::size_t>(swizzled.scale_bytes())),
                    swizzle_scales(ref.scales, rows, ref.scale_cols()), "swizzled scales");
  quantizer.quantize(linear, input, gs, packed, scales);
  bad += mismatches(read_back<std::uint8_t>(ctx, packed, packed_bytes), ref.packed, "packed codes");
  bad += mismatches(read_back<std::uint8_t>(ctx, scales, ref.scales.size()), ref.scales, "linear scales");
  quantizer.dequantize(linear, packed, scales, ref.global_scale, DequantizedType::f32, out_f32);
  quantizer.dequantize(swizzled, packed, sw_scales, ref.global_scale, DequantizedType::bf16, out_bf16);
  const auto w32 = read_back<float>(ctx, out_f32, static_cast<std::size_t>(n));
  const auto w16 = read_back<std::uint16_t>(ctx, out_bf16, static_cast<std::size_t>(n));
  std::size_t bad_values = 0;
  for (std::size_t i = 0; i < w32.size(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, &w32[i], 4);
    std::memcpy(&b, &ref_w[i], 4);
    if (a != b || w16[i] != float_to_bf16(ref_w[i])) {
      if (bad_values++ == 0)
        fmt::print("  MISMATCH dequantized element {}: device {} (BF16 0x{:04x}), host {}\n", i, w32[i], w16[i],
                   ref_w[i]);
    }
  }
  bad += bad_values;
  fmt::print("  device vs host reference (packed codes, linear and swizzled scales, FP32 and BF16 dequant): {}\n",
             bad == 0 ? "bit-exact" : fmt::format("FAILED, {} differences", bad));

  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = bf16_to_float(x[i]), d = xi - static_cast<double>(w32[i]);
    err2 += d * d;
    ref2 += xi * xi;
  }
  fmt::print("  round trip BF16 → {} → FP32: relative RMS error {:.4f}\n", to_string(format),
             ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0);

  const double gb_bf16 = static_cast<double>(n) * 2 / 1e9;
  const double q_lin = median_ms(ctx, o.runs, [&] { return quantizer.quantize(linear, input, gs, packed, scales); });
  const double q_sw =
      median_ms(ctx, o.runs, [&] { return quantizer.quantize(swizzled, input, gs, packed, sw_scales); });
  const double dq = median_ms(ctx, o.runs, [&] {
    return quantizer.dequantize(linear, packed, scales, ref.global_scale, DequantizedType::bf16, out_bf16);
  });
  fmt::print("  quantize, linear scales:   {:8.3f} ms  {:7.2f} GB/s of BF16 input   (median of {})\n", q_lin,
             gb_bf16 / (q_lin * 1e-3), o.runs);
  fmt::print("  quantize, swizzled scales: {:8.3f} ms  {:7.2f} GB/s of BF16 input\n", q_sw, gb_bf16 / (q_sw * 1e-3));
  fmt::print("  dequantize to BF16:        {:8.3f} ms  {:7.2f} GB/s of BF16 output\n", dq, gb_bf16 / (dq * 1e-3));
  return bad == 0;
}

}  // namespace

bool demo_roundtrip(const Context& ctx, const RoundTripOptions& o) {
  if (o.rows < 1 || o.cols < 32 || o.cols % 32 != 0 || o.runs < 1)
    fail(
        "demo: need rows >= 1, cols a positive multiple of 32 (both block sizes) and runs >= 1; got rows {}, "
        "cols {}, runs {}",
        o.rows, o.cols, o.runs);
  QuantizerOptions qo;
  if (!o.local_size.empty()) {
    if (o.local_size.size() != 2) fail("demo: --local-size takes two numbers (block columns, rows)");
    qo.local_size = {o.local_size[0], o.local_size[1]};
  }
  qo.blocks_per_item = o.blocks_per_item;
  Quantizer quantizer(ctx, qo);
  const auto local = quantizer.options().local_size;
  const std::int64_t n = o.rows * o.cols;
  fmt::print("input: BF16 [{}, {}] ({:.1f} MiB), N(0, 1) values, seed {}\n", o.rows, o.cols,
             static_cast<double>(n) * 2 / (1 << 20), o.seed);
  fmt::print("kernels: {} blocks per work-item, work-groups of {} × {}\n", quantizer.options().blocks_per_item,
             local[0], local[1]);
  const std::vector<std::uint16_t> x = gaussian_bf16(n, o.seed);
  const cl::Buffer input = device_buffer(ctx, x.size(), x.data());

  bool ok = true;
  for (const WeightFormat format : {WeightFormat::nvfp4, WeightFormat::mxfp4})
    ok = demo_format(ctx, quantizer, format, o, x, input) && ok;
  return ok;
}

}  // namespace fp4cl::cli
