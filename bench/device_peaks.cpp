#include "device_peaks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "cl/huge_page_memory.hpp"
#include "cl/opencl_calls.hpp"
#include "fp4cl/error.hpp"
#include "timing.hpp"  // median

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

// One launch's time from OpenCL event profiling.
double launch_seconds(const Context& ctx, cl::Kernel& kernel, const cl::NDRange& global, const cl::NDRange& local) {
  cl::Event e;
  const cl_int err = ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, global, local, nullptr, &e);
  if (err != CL_SUCCESS) throw Error("enqueueing a device probe kernel", err);
  e.wait();
  return event_seconds(e);
}

// The median time of `iters` launches after one untimed launch (which compiles for the local size).
double median_launch_seconds(const Context& ctx, cl::Kernel& kernel, const cl::NDRange& global,
                             const cl::NDRange& local, int iters) {
  std::vector<double> times;
  for (int it = 0; it <= iters; ++it) {
    const double s = launch_seconds(ctx, kernel, global, local);
    if (it > 0) times.push_back(s);
  }
  return median(std::move(times));
}

bool is_gpu(const Context& ctx) { return ctx.info().kind != DeviceKind::cpu; }

// The configurations the probe tries on this device (`items` > 0: that many work-items alone).
std::vector<StreamConfig> stream_configs(const Context& ctx, std::size_t bytes_wanted, std::size_t items) {
  if (is_gpu(ctx)) {
    // 2048 work-items per compute unit, fewer (whole groups of 256) where a small buffer
    // (--stream-mib) would leave less than 256 bytes each: 16 MiB on an H100 once failed here.
    const std::size_t n = items > 0 ? items
                                    : std::min<std::size_t>(std::size_t{ctx.info().compute_units} * 2048,
                                                            bytes_wanted / (256 * 256) * 256);
    return {{n, std::gcd(n, std::size_t{256})}};  // --items need not be a multiple of 256
  }
  if (items > 0) return {{items, 1}};
  // PoCL runs every configuration with at least one work-group per compute unit at the same rate
  // within a run (bench/README.md: 4-64 work-items, local sizes 1 and 2, within ~2 % of each
  // other); what moves the rate is the memory's pages and the machine's other work. So a few
  // spans per compute unit, local size 1: one, four and sixteen.
  const std::size_t cu = std::max<std::size_t>(1, ctx.info().compute_units);
  return {{cu, 1}, {cu * 4, 1}, {cu * 16, 1}};
}

}  // namespace

std::size_t last_level_cache_bytes(const Context& ctx) {
  cl_ulong cache = 0;
  ctx.device().getInfo(CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, &cache);
  const std::size_t floor = is_gpu(ctx) ? 0 : std::size_t{32} << 20;
  return std::max(static_cast<std::size_t>(cache), floor);
}

StreamResult measure_stream_read(const Context& ctx, double mib, int iters, std::size_t items) {
  const bool gpu = is_gpu(ctx);
  const double want = mib > 0 ? mib * 1048576.0 : 512.0 * 1048576.0;
  const std::size_t cap = static_cast<std::size_t>(std::min<double>(want, static_cast<double>(ctx.info().max_alloc_bytes)));
  const std::vector<StreamConfig> configs = stream_configs(ctx, cap, items);
  std::size_t max_items = 0;
  for (const auto& c : configs) max_items = std::max(max_items, c.items);
  // Whole float16 spans of 4 for every configuration's work-items (the lcm of their counts is the largest).
  const std::size_t bytes = max_items == 0 ? 0 : cap / (max_items * 256) * (max_items * 256);
  if (max_items == 0 || bytes == 0) throw Error("the stream probe's buffer is too small for its work-items");
  cl::Program program = probe_program(ctx);
  cl_int err = CL_SUCCESS;
  cl::Kernel kernel(program, gpu ? "stream_grid" : "stream_spans", &err);
  // Allocated as fp4cl allocates its layers' buffers: on CPU devices on huge pages (the OS
  // permitting), which read faster than the C library's 4 KiB pages (cl/huge_page_memory.hpp).
  cl::Buffer data = allocate_buffer(ctx, CL_MEM_READ_ONLY, bytes, nullptr, "the stream probe's buffer");
  cl::Buffer out = allocate_buffer(ctx, CL_MEM_WRITE_ONLY, max_items * sizeof(float), nullptr, "the stream probe's output");
  const float zero = 0.0f;
  ctx.queue().enqueueFillBuffer(data, zero, 0, bytes);
  ctx.queue().finish();
  kernel.setArg(0, data);
  kernel.setArg(1, out);
  // Rounds over the configurations, one launch of each per round (after one untimed launch each,
  // which compiles for the local size): a burst of other work on the machine then slows every
  // configuration alike instead of deciding which one wins.
  std::vector<std::vector<double>> seconds(configs.size());
  for (int round = -1; round < iters; ++round) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      kernel.setArg(2, static_cast<cl_ulong>(gpu ? bytes / 16 : bytes / 64 / configs[c].items));
      const double s = launch_seconds(ctx, kernel, cl::NDRange(configs[c].items), cl::NDRange(configs[c].local));
      if (round >= 0) seconds[c].push_back(s);
    }
  }
  StreamResult best;
  best.bytes = bytes;
  void* host = nullptr;  // set where the buffer is fp4cl's huge-page memory (CL_MEM_USE_HOST_PTR)
  if (data.getInfo(CL_MEM_HOST_PTR, &host) == CL_SUCCESS && host != nullptr)
    best.huge_page_bytes = huge_page_backed_bytes(host, bytes);
  for (std::size_t c = 0; c < configs.size(); ++c) {
    const double gbps = static_cast<double>(bytes) / median(seconds[c]) * 1e-9;
    best.per_config.push_back({configs[c], gbps});
    if (gbps > best.gbps) {
      best.gbps = gbps;
      best.items = configs[c].items;
      best.local = configs[c].local;
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

StreamResult highest(const StreamResult& a, const StreamResult& b) {
  StreamResult r = b.gbps > a.gbps ? b : a;
  r.probes = a.probes + b.probes;
  return r;
}

std::string StreamResult::describe() const {
  std::string s = fmt::format("{:.1f} GB/s ({} work-items in groups of {}, {} MiB", gbps, items, local, bytes >> 20);
  if (huge_page_bytes > 0) s += fmt::format(", {:.0f} % on huge pages", 100.0 * static_cast<double>(huge_page_bytes) / static_cast<double>(bytes));
  if (probes > 1) s += fmt::format("; the highest of {} probes", probes);
  return s + ")";
}

std::string DevicePeaks::describe() const {
  return fmt::format("stream read {}, fp32 FMA {:.0f} GFLOP/s ({} work-items x {} float16 chains)", stream.describe(),
                     fma.gflops, fma.items, fma.chains);
}

DevicePeaks measure_peaks(const Context& ctx, double stream_mib) {
  DevicePeaks p;
  p.stream = measure_stream_read(ctx, stream_mib);
  p.fma = measure_fma_peak(ctx);
  return p;
}

}  // namespace fp4cl::bench
