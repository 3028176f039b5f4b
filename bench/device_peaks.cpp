#include "device_peaks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "fp4cl/error.hpp"

namespace fp4cl::bench {

namespace {

const char* kProbeSource = R"CL(
__kernel void stream_spans(const __global float16* restrict data, __global float* restrict out, ulong per_item) {
  const size_t i = get_global_id(0);
  const __global float16* p = data + i * per_item;
  float16 a = (float16)(0.0f), b = (float16)(0.0f), c = (float16)(0.0f), d = (float16)(0.0f);
  for (ulong j = 0; j < per_item; j += 4) {
    a += p[j];
    b += p[j + 1];
    c += p[j + 2];
    d += p[j + 3];
  }
  const float16 s = (a + b) + (c + d);
  out[i] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 + s.sa + s.sb + s.sc + s.sd + s.se + s.sf;
}
__kernel void stream_grid(const __global float4* restrict data, __global float* restrict out, ulong count) {
  float4 a = (float4)(0.0f);
  for (size_t j = get_global_id(0); j < count; j += get_global_size(0)) a += data[j];
  out[get_global_id(0)] = a.x + a.y + a.z + a.w;
}
// Independent chains of float16 FMAs (written as a * b + c, which OpenCL C contracts to FMA
// instructions without a call into the builtin library): 8 chains fill AVX-512's 32 registers
// (DEVICES.md), 4 chains AVX2's 16 (8 would spill). a and b keep the values bounded and normal;
// the host passes them so that the compiler cannot fold the loop.
#define FMA_SEED (float16)((float)get_global_id(0) * 1e-3f)
__kernel void fma_chains8(__global float* restrict out, int iters, float a, float b) {
  float16 c0 = FMA_SEED, c1 = c0 + 0.1f, c2 = c0 + 0.2f, c3 = c0 + 0.3f;
  float16 c4 = c0 + 0.4f, c5 = c0 + 0.5f, c6 = c0 + 0.6f, c7 = c0 + 0.7f;
  for (int i = 0; i < iters; ++i) {
    c0 = c0 * a + b; c1 = c1 * a + b; c2 = c2 * a + b; c3 = c3 * a + b;
    c4 = c4 * a + b; c5 = c5 * a + b; c6 = c6 * a + b; c7 = c7 * a + b;
  }
  const float16 s = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7));
  out[get_global_id(0)] = s.s0 + s.s5 + s.sa + s.sf;
}
__kernel void fma_chains4(__global float* restrict out, int iters, float a, float b) {
  float16 c0 = FMA_SEED, c1 = c0 + 0.1f, c2 = c0 + 0.2f, c3 = c0 + 0.3f;
  for (int i = 0; i < iters; ++i) {
    c0 = c0 * a + b; c1 = c1 * a + b; c2 = c2 * a + b; c3 = c3 * a + b;
  }
  const float16 s = (c0 + c1) + (c2 + c3);
  out[get_global_id(0)] = s.s0 + s.s5 + s.sa + s.sf;
}
)CL";

cl::Program probe_program(const Context& ctx) {
  cl_int err = CL_SUCCESS;
  cl::Program program(ctx.opencl_context(), std::string(kProbeSource), false, &err);
  if (err == CL_SUCCESS) err = program.build(std::vector<cl::Device>{ctx.device()});
  if (err != CL_SUCCESS) {
    std::string log;
    program.getBuildInfo(ctx.device(), CL_PROGRAM_BUILD_LOG, &log);
    throw Error("building the device probe kernels: " + log, err);
  }
  return program;
}

double event_seconds(const cl::Event& e) {
  cl_ulong t0 = 0, t1 = 0;
  e.getProfilingInfo(CL_PROFILING_COMMAND_START, &t0);
  e.getProfilingInfo(CL_PROFILING_COMMAND_END, &t1);
  return static_cast<double>(t1 - t0) * 1e-9;
}

// The median time of `iters` launches after one untimed launch (which compiles for the local size).
double median_launch_seconds(const Context& ctx, cl::Kernel& kernel, const cl::NDRange& global,
                             const cl::NDRange& local, int iters) {
  std::vector<double> times;
  for (int it = 0; it <= iters; ++it) {
    cl::Event e;
    const cl_int err = ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, global, local, nullptr, &e);
    if (err != CL_SUCCESS) throw Error("enqueueing a device probe kernel", err);
    e.wait();
    if (it > 0) times.push_back(event_seconds(e));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

bool is_gpu(const Context& ctx) { return ctx.info().kind != DeviceKind::cpu; }

}  // namespace

std::size_t last_level_cache_bytes(const Context& ctx) {
  cl_ulong cache = 0;
  ctx.device().getInfo(CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, &cache);
  const std::size_t floor = is_gpu(ctx) ? 0 : std::size_t{32} << 20;
  return std::max(static_cast<std::size_t>(cache), floor);
}

StreamResult measure_stream_read(const Context& ctx, double mib, int iters, std::size_t items) {
  const bool gpu = is_gpu(ctx);
  // PoCL's streaming rate depends on the work-item count and the local size (DEVICES.md: 35-58
  // GB/s on the CI machine over 2-64 work-items and local sizes 1-2), so CPUs sweep both and keep
  // the best: the yardstick is the device's true peak, not one lucky or unlucky configuration.
  std::vector<std::size_t> counts;
  std::vector<std::size_t> locals = {1};
  const double want = mib > 0 ? mib * 1048576.0 : 512.0 * 1048576.0;
  const std::size_t cap = static_cast<std::size_t>(std::min<double>(want, static_cast<double>(ctx.info().max_alloc_bytes)));
  if (items > 0) {
    counts = {items};
  } else if (gpu) {
    // 2048 work-items per compute unit, fewer (whole groups of 256) where a small buffer
    // (--stream-mib) would leave less than 256 bytes each: 16 MiB on an H100 once failed here.
    counts = {std::min<std::size_t>(std::size_t{ctx.info().compute_units} * 2048, cap / (256 * 256) * 256)};
  } else {
    const std::size_t cu = std::max<std::size_t>(1, ctx.info().compute_units);
    for (std::size_t n = cu; n <= std::max<std::size_t>(64, cu * 4); n *= 2) counts.push_back(n);
    locals = {1, 2};
  }
  const std::size_t max_items = *std::max_element(counts.begin(), counts.end());
  const std::size_t bytes = cap / (max_items * 256) * (max_items * 256);
  if (max_items == 0 || bytes == 0) throw Error("the stream probe's buffer is too small for its work-items");
  cl::Program program = probe_program(ctx);
  cl_int err = CL_SUCCESS;
  cl::Kernel kernel(program, gpu ? "stream_grid" : "stream_spans", &err);
  cl::Buffer data(ctx.opencl_context(), CL_MEM_READ_ONLY, bytes, nullptr, &err);
  cl::Buffer out(ctx.opencl_context(), CL_MEM_WRITE_ONLY, max_items * sizeof(float), nullptr, &err);
  if (err != CL_SUCCESS) throw Error("allocating the stream probe's buffers", err);
  const float zero = 0.0f;
  ctx.queue().enqueueFillBuffer(data, zero, 0, bytes);
  ctx.queue().finish();
  kernel.setArg(0, data);
  kernel.setArg(1, out);
  StreamResult best;
  best.bytes = bytes;
  for (std::size_t n : counts) {
    kernel.setArg(2, static_cast<cl_ulong>(gpu ? bytes / 16 : bytes / 64 / n));
    for (std::size_t local : locals) {
      if (n % local != 0) continue;
      const double s =
          median_launch_seconds(ctx, kernel, cl::NDRange(n), gpu ? cl::NDRange(256) : cl::NDRange(local), iters);
      const double gbps = static_cast<double>(bytes) / s * 1e-9;
      if (gbps > best.gbps) {
        best.gbps = gbps;
        best.items = n;
        best.local = gpu ? 256 : local;
      }
    }
  }
  return best;
}

FmaResult measure_fma_peak(const Context& ctx, int iters, std::size_t items) {
  const bool gpu = is_gpu(ctx);
  std::vector<std::size_t> counts;
  if (items > 0) counts = {items};
  else if (gpu) counts = {std::size_t{ctx.info().compute_units} * 1024};
  else counts = {16, 32, 64};
  const int loop = gpu ? 4096 : 8192;
  cl::Program program = probe_program(ctx);
  const std::size_t max_items = *std::max_element(counts.begin(), counts.end());
  cl_int err = CL_SUCCESS;
  cl::Buffer out(ctx.opencl_context(), CL_MEM_WRITE_ONLY, max_items * sizeof(float), nullptr, &err);
  if (err != CL_SUCCESS) throw Error("allocating the FMA probe's buffer", err);
  FmaResult best;
  for (int chains : {8, 4}) {
    cl::Kernel kernel(program, chains == 8 ? "fma_chains8" : "fma_chains4", &err);
    if (err != CL_SUCCESS) throw Error("creating the FMA probe kernel", err);
    kernel.setArg(0, out);
    kernel.setArg(1, static_cast<cl_int>(loop));
    kernel.setArg(2, 0.999f);
    kernel.setArg(3, 0.001f);
    for (std::size_t n : counts) {
      const double s = median_launch_seconds(ctx, kernel, cl::NDRange(n), gpu ? cl::NDRange(128) : cl::NDRange(1), iters);
      const double gflops = static_cast<double>(n) * loop * chains * 16.0 * 2.0 / s * 1e-9;
      if (gflops > best.gflops) {
        best.gflops = gflops;
        best.items = n;
        best.chains = chains;
      }
    }
  }
  return best;
}

std::string DevicePeaks::describe() const {
  return fmt::format(
      "stream read {:.1f} GB/s ({} work-items in groups of {}, {} MiB), fp32 FMA {:.0f} GFLOP/s ({} work-items x {} float16 chains)",
      stream.gbps, stream.items, stream.local, stream.bytes >> 20, fma.gflops, fma.items, fma.chains);
}

DevicePeaks measure_peaks(const Context& ctx, double stream_mib) {
  DevicePeaks p;
  p.stream = measure_stream_read(ctx, stream_mib);
  p.fma = measure_fma_peak(ctx);
  return p;
}

}  // namespace fp4cl::bench
