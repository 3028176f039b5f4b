// Runs the shared codecs (kernels/common/formats.cl, quant_recipe.cl, fp4_vector.cl) on the OpenCL
// device, element by element, so tests can compare them with the host over large value sets.
// Used by device_codecs_test.cpp and the ml_dtypes interop dump (formats_dump.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cl/exact_division.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"

namespace fp4cl::test {

inline const char* device_codec_kernels() {
  return R"CLC(
__kernel void encode_scalars(__global const float* x, __global uchar* e2m1, __global uchar* e4m3,
                             __global uchar* e8m0, __global ushort* bf16) {
  const size_t i = get_global_id(0);
  e2m1[i] = (uchar)e2m1_encode(x[i]);
  e4m3[i] = (uchar)e4m3_encode(x[i]);
  e8m0[i] = (uchar)e8m0_encode(x[i]);
  bf16[i] = (ushort)float_to_bf16(x[i]);
}
// The vector forms, 8 values per work-item.
__kernel void encode_vectors(__global const float* x, __global uchar* e2m1, __global ushort* bf16) {
  const size_t i = get_global_id(0);
  const float8 v = vload8(i, x);
  vstore8(convert_uchar8(e2m1_magnitudes8(v) | ((as_uint8(v) >> 28) & 8u)), i, e2m1);
  vstore8(convert_ushort8(float_to_bf16x8(v)), i, bf16);
}
__kernel void decode_all(__global float* e2m1, __global float* e2m1x8, __global float* e4m3, __global float* e8m0) {
  const uint b = get_global_id(0);  // 0..255
  if (b < 16u) e2m1[b] = e2m1_decode(b);
  vstore8(e2m1_decode8((uint8)(b & 15u, b >> 4, b & 15u, b >> 4, b & 15u, b >> 4, b & 15u, b >> 4)), b, e2m1x8);
  e4m3[b] = e4m3_decode(b);
  e8m0[b] = e8m0_decode(b);
}
// The recipe's scalar steps for one block maximum each.
__kernel void recipe_steps(__global const float* amax, float gs, __global uchar* nv_scale, __global float* nv_mult,
                           __global uchar* mx_scale, __global float* mx_mult) {
  const size_t i = get_global_id(0);
  const uint sf = nvfp4_scale_byte(amax[i], gs);
  nv_scale[i] = (uchar)sf;
  nv_mult[i] = nvfp4_multiplier(sf, gs);
  const uint e = mxfp4_scale_byte(amax[i]);
  mx_scale[i] = (uchar)e;
  mx_mult[i] = mxfp4_multiplier(e);
}
// The same steps vectorized across 8 block maxima (fp4_vector.cl).
__kernel void recipe_steps8(__global const float* amax, float gs, __global uchar* nv_scale, __global float* nv_mult,
                            __global uchar* mx_scale, __global float* mx_mult) {
  const size_t i = get_global_id(0);
  const float8 a = vload8(i, amax);
  const uint8 sf = nvfp4_scale_bytes8(a, gs);
  vstore8(convert_uchar8(sf), i, nv_scale);
  vstore8(nvfp4_multipliers8(sf, gs), i, nv_mult);
  const uint8 e = mxfp4_scale_bytes8(a);
  vstore8(convert_uchar8(e), i, mx_scale);
  vstore8(mxfp4_multipliers8(e), i, mx_mult);
}
)CLC";
}

class DeviceCodecs {
 public:
  // Built with the exact-division option add_exact_division chooses, or with `options`.
  explicit DeviceCodecs(const Context& ctx, std::optional<BuildOptions> build_options = std::nullopt) : ctx_(ctx) {
    BuildOptions options;
    if (build_options) {
      options = *build_options;
    } else {
      add_exact_division(options, ctx.info(), "the device codec test kernels");
    }
    const std::string source = kernel_source("common/fp4_vector.cl") + device_codec_kernels();
    cl_int err = CL_SUCCESS;
    program_ = cl::Program(ctx.opencl_context(), source, false, &err);
    check_cl(err, "creating the device codec test program");
    err = program_.build({ctx.device()}, options.str().c_str());
    if (err != CL_SUCCESS) {
      std::string log;
      program_.getBuildInfo(ctx.device(), CL_PROGRAM_BUILD_LOG, &log);
      check_cl(err, "building the device codec test program:\n{}", log);
    }
  }

  struct Encoded {
    std::vector<std::uint8_t> e2m1, e4m3, e8m0;
    std::vector<std::uint16_t> bf16;
  };
  // Scalar encoders (formats.cl) of every value.
  Encoded encode_scalars(const std::vector<float>& x) {
    const std::size_t n = x.size();
    cl::Buffer in = upload(x), e2m1 = buffer(n), e4m3 = buffer(n), e8m0 = buffer(n), bf16 = buffer(2 * n);
    run("encode_scalars", n, in, e2m1, e4m3, e8m0, bf16);
    return {download<std::uint8_t>(e2m1, n), download<std::uint8_t>(e4m3, n), download<std::uint8_t>(e8m0, n),
            download<std::uint16_t>(bf16, n)};
  }
  // Vector encoders (fp4_vector.cl) of every value; x.size() must be a multiple of 8. Only e2m1
  // and bf16 are filled.
  Encoded encode_vectors(const std::vector<float>& x) {
    const std::size_t n = x.size();
    if (n % 8 != 0) fail("encode_vectors: {} values are not a multiple of 8", n);
    cl::Buffer in = upload(x), e2m1 = buffer(n), bf16 = buffer(2 * n);
    run("encode_vectors", n / 8, in, e2m1, bf16);
    return {download<std::uint8_t>(e2m1, n), {}, {}, download<std::uint16_t>(bf16, n)};
  }
  struct Decoded {
    std::vector<float> e2m1;     // [16]
    std::vector<float> e2m1x8;   // [256 bytes][8]: each byte's low and high nibble decoded, repeated
    std::vector<float> e4m3, e8m0;  // [256]
  };
  Decoded decode_all() {
    cl::Buffer e2m1 = buffer(16 * 4), x8 = buffer(256 * 8 * 4), e4m3 = buffer(256 * 4), e8m0 = buffer(256 * 4);
    run("decode_all", 256, e2m1, x8, e4m3, e8m0);
    return {download<float>(e2m1, 16), download<float>(x8, 256 * 8), download<float>(e4m3, 256),
            download<float>(e8m0, 256)};
  }
  struct RecipeSteps {
    std::vector<std::uint8_t> nv_scale, mx_scale;
    std::vector<float> nv_mult, mx_mult;
  };
  // The recipe's steps for each block maximum: the scalar functions (quant_recipe.cl), or with
  // `vector` the 8-lane ones (fp4_vector.cl, amax.size() a multiple of 8).
  RecipeSteps recipe_steps(const std::vector<float>& amax, float gs, bool vector = false) {
    const std::size_t n = amax.size();
    if (vector && n % 8 != 0) fail("recipe_steps: {} values are not a multiple of 8", n);
    cl::Buffer in = upload(amax), nv_scale = buffer(n), nv_mult = buffer(4 * n), mx_scale = buffer(n),
               mx_mult = buffer(4 * n);
    run(vector ? "recipe_steps8" : "recipe_steps", vector ? n / 8 : n, in, gs, nv_scale, nv_mult, mx_scale, mx_mult);
    return {download<std::uint8_t>(nv_scale, n), download<std::uint8_t>(mx_scale, n), download<float>(nv_mult, n),
            download<float>(mx_mult, n)};
  }

 private:
  template <typename T>
  cl::Buffer upload(const std::vector<T>& v) {
    cl_int err = CL_SUCCESS;
    cl::Buffer b(ctx_.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, std::max<std::size_t>(1, v.size()) * sizeof(T),
                 const_cast<T*>(v.data()), &err);
    check_cl(err, "uploading {} test values", v.size());
    return b;
  }
  cl::Buffer buffer(std::size_t bytes) {
    cl_int err = CL_SUCCESS;
    cl::Buffer b(ctx_.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(1, bytes), nullptr, &err);
    check_cl(err, "allocating {} bytes", bytes);
    return b;
  }
  template <typename T>
  std::vector<T> download(const cl::Buffer& b, std::size_t n) {
    std::vector<T> v(n);
    if (n) check_cl(ctx_.queue().enqueueReadBuffer(b, CL_TRUE, 0, n * sizeof(T), v.data()), "reading test results");
    return v;
  }
  template <typename... Args>
  void run(const char* name, std::size_t global, const Args&... args) {
    cl_int err = CL_SUCCESS;
    cl::Kernel k(program_, name, &err);
    check_cl(err, "creating test kernel {}", name);
    cl_uint i = 0;
    ((check_cl(k.setArg(i, args), "setting argument {} of {}", i, name), ++i), ...);
    if (global == 0) return;
    check_cl(ctx_.queue().enqueueNDRangeKernel(k, cl::NullRange, cl::NDRange(global)), "running {}", name);
    check_cl(ctx_.queue().finish(), "finishing {}", name);
  }

  Context ctx_;
  cl::Program program_;
};

}  // namespace fp4cl::test
