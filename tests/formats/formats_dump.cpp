// fp4cl_formats_dump OUT_DIR: writes what the ml_dtypes interop test (ml_dtypes_interop.py)
// compares — a large set of float32 values with fp4cl's encodings of each from the host and from
// the OpenCL device, every code's decoded value, and NVFP4/MXFP4 quantizations of BF16 rows from
// the host reference and from the quantize kernels. Raw little-endian arrays, one file each,
// described by OUT_DIR/manifest.json.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "device_codecs.hpp"
#include "bf16_test_data.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/quantize.hpp"
#include "test_helpers.hpp"

namespace fp4cl {
namespace {

using test::float_of_bits;


// Every BF16 pattern; the E2M1, E4M3, E8M0 and BF16 rounding ties and their float neighbours;
// random float32 values over the whole range.
std::vector<float> value_set() {
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 65536; ++b) v.push_back(float_of_bits(b << 16));
  auto with_neighbours = [&](float x) {
    for (const float s : {x, -x}) {
      v.push_back(s);
      v.push_back(std::nextafter(s, 0.0f));
      v.push_back(std::nextafter(s, s * 2));
    }
  };
  for (const float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f}) with_neighbours(t);
  for (int b = 0; b < 0x7E; ++b)  // E4M3 midpoints, and the overflow boundary 464 = (448 + 480) / 2
    with_neighbours((e4m3_to_float(static_cast<std::uint8_t>(b)) + e4m3_to_float(static_cast<std::uint8_t>(b + 1))) / 2);
  with_neighbours(464.0f);
  for (int e = -127; e <= 127; ++e) with_neighbours(std::ldexp(1.5f, e));  // E8M0 ties
  std::mt19937 rng(31);
  for (int i = 0; i < 65536; ++i)  // BF16 ties: the low half exactly 0x8000
    v.push_back(float_of_bits((static_cast<std::uint32_t>(rng()) & 0xFFFF0000u) | 0x8000u));
  for (int i = 0; i < 200000; ++i) v.push_back(float_of_bits(static_cast<std::uint32_t>(rng())));
  while (v.size() % 8 != 0) v.push_back(0.0f);
  return v;
}

template <typename T>
void write(const std::string& dir, const std::string& name, const std::vector<T>& data, nlohmann::json& manifest,
           const char* dtype) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
  if (!out) throw Error("cannot write " + path);
  manifest["files"][name] = {{"dtype", dtype}, {"count", data.size()}};
}

template <typename T>
std::vector<T> read_back(const Context& ctx, const cl::Buffer& b, std::size_t n) {
  std::vector<T> v(n);
  check_cl(ctx.queue().enqueueReadBuffer(b, CL_TRUE, 0, n * sizeof(T), v.data()), "reading a kernel result");
  return v;
}

cl::Buffer device_buffer(const Context& ctx, std::size_t bytes, const void* data = nullptr) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), std::max<std::size_t>(1, bytes),
               const_cast<void*>(data), &err);
  check_cl(err, "allocating {} bytes", bytes);
  return b;
}

// Host and kernel quantizations of `x` [rows, cols] in `format`, written as <prefix>_*.
void dump_quantization(const std::string& dir, const std::string& prefix, const Context& ctx, Quantizer& quantizer,
                       WeightFormat format, const std::vector<std::uint16_t>& x, std::int64_t rows, std::int64_t cols,
                       float gs, nlohmann::json& manifest) {
  const QuantizedRows ref = quantize(format, x, rows, cols, gs);
  const Fp4MatrixShape linear{format, ScaleLayout::linear, rows, cols}, swizzled{format, ScaleLayout::swizzled, rows, cols};
  const cl::Buffer input = device_buffer(ctx, x.size() * 2, x.data());
  const cl::Buffer packed = device_buffer(ctx, static_cast<std::size_t>(linear.packed_bytes()));
  const cl::Buffer scales = device_buffer(ctx, static_cast<std::size_t>(linear.scale_bytes()));
  const cl::Buffer sw_packed = device_buffer(ctx, static_cast<std::size_t>(linear.packed_bytes()));
  const cl::Buffer sw_scales = device_buffer(ctx, static_cast<std::size_t>(swizzled.scale_bytes()));
  quantizer.quantize(linear, input, gs, packed, scales);
  quantizer.quantize(swizzled, input, gs, sw_packed, sw_scales);
  write(dir, prefix + "_input.u16", x, manifest, "uint16");
  write(dir, prefix + "_host_packed.u8", ref.packed, manifest, "uint8");
  write(dir, prefix + "_host_scales.u8", ref.scales, manifest, "uint8");
  write(dir, prefix + "_host_dequant.f32", dequantize(ref), manifest, "float32");
  write(dir, prefix + "_device_packed.u8", read_back<std::uint8_t>(ctx, packed, ref.packed.size()), manifest, "uint8");
  write(dir, prefix + "_device_scales.u8", read_back<std::uint8_t>(ctx, scales, ref.scales.size()), manifest, "uint8");
  write(dir, prefix + "_device_swizzled_scales.u8",
        read_back<std::uint8_t>(ctx, sw_scales, static_cast<std::size_t>(swizzled.scale_bytes())), manifest, "uint8");
  manifest["quantizations"][prefix] = {{"format", to_string(format)}, {"rows", rows}, {"cols", cols}, {"gs", gs}};
}

void run(const std::string& dir) {
  nlohmann::json manifest;
  const Context ctx = Context::create();
  manifest["device"] = ctx.info().describe();

  const std::vector<float> values = value_set();
  write(dir, "values.f32", values, manifest, "float32");
  std::vector<std::uint8_t> e2m1, e4m3, e8m0;
  std::vector<std::uint16_t> bf16;
  for (const float x : values) {
    e2m1.push_back(float_to_e2m1(x));
    e4m3.push_back(float_to_e4m3(x));
    e8m0.push_back(float_to_e8m0(x));
    bf16.push_back(float_to_bf16(x));
  }
  write(dir, "host_e2m1.u8", e2m1, manifest, "uint8");
  write(dir, "host_e4m3.u8", e4m3, manifest, "uint8");
  write(dir, "host_e8m0.u8", e8m0, manifest, "uint8");
  write(dir, "host_bf16.u16", bf16, manifest, "uint16");

  test::DeviceCodecs codecs(ctx);
  const auto scalar = codecs.encode_scalars(values);
  write(dir, "device_e2m1.u8", scalar.e2m1, manifest, "uint8");
  write(dir, "device_e4m3.u8", scalar.e4m3, manifest, "uint8");
  write(dir, "device_e8m0.u8", scalar.e8m0, manifest, "uint8");
  write(dir, "device_bf16.u16", scalar.bf16, manifest, "uint16");
  const auto vec = codecs.encode_vectors(values);
  write(dir, "device_vector_e2m1.u8", vec.e2m1, manifest, "uint8");
  write(dir, "device_vector_bf16.u16", vec.bf16, manifest, "uint16");

  std::vector<float> d_e2m1, d_e4m3, d_e8m0;
  for (int c = 0; c < 16; ++c) d_e2m1.push_back(e2m1_to_float(static_cast<std::uint8_t>(c)));
  for (int b = 0; b < 256; ++b) {
    d_e4m3.push_back(e4m3_to_float(static_cast<std::uint8_t>(b)));
    d_e8m0.push_back(e8m0_to_float(static_cast<std::uint8_t>(b)));
  }
  write(dir, "host_decode_e2m1.f32", d_e2m1, manifest, "float32");
  write(dir, "host_decode_e4m3.f32", d_e4m3, manifest, "float32");
  write(dir, "host_decode_e8m0.f32", d_e8m0, manifest, "float32");
  const auto decoded = codecs.decode_all();
  write(dir, "device_decode_e2m1.f32", decoded.e2m1, manifest, "float32");
  write(dir, "device_decode_e4m3.f32", decoded.e4m3, manifest, "float32");
  write(dir, "device_decode_e8m0.f32", decoded.e8m0, manifest, "float32");

  // Quantizations: random and adversarial rows (NaN elements zeroed: ml_dtypes has no rule for
  // them to compare with), and the FP4.md §8 worked example.
  Quantizer quantizer(ctx);
  const std::int64_t rows = 48, cols = 2880;
  std::vector<std::uint16_t> x = test::random_bf16(rows / 2, cols, 41);
  const std::vector<std::uint16_t> adversarial = test::adversarial_bf16(rows / 2, cols, 32, 43);
  x.insert(x.end(), adversarial.begin(), adversarial.end());
  for (auto& v : x)
    if (std::isnan(bf16_to_float(v))) v = 0;
  dump_quantization(dir, "nvfp4", ctx, quantizer, WeightFormat::nvfp4, x, rows, cols, 0.37f, manifest);
  dump_quantization(dir, "nvfp4_gs1", ctx, quantizer, WeightFormat::nvfp4, x, rows, cols, 1.0f, manifest);
  dump_quantization(dir, "mxfp4", ctx, quantizer, WeightFormat::mxfp4, x, rows, cols, 1.0f, manifest);
  std::vector<std::uint16_t> example(16, 0);
  example[0] = float_to_bf16(3.0f);
  example[1] = float_to_bf16(-1.296875f);
  example[2] = float_to_bf16(0.1298828125f);
  example[3] = float_to_bf16(0.125f);
  dump_quantization(dir, "worked_example", ctx, quantizer, WeightFormat::nvfp4, example, 1, 16, 1.0f, manifest);

  std::ofstream(dir + "/manifest.json") << manifest.dump(2) << "\n";
}

}  // namespace
}  // namespace fp4cl

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    fp4cl::run(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4cl_formats_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
