// fp4cl-bench stream: the device's streaming-read bandwidth through OpenCL, the yardstick of the
// bandwidth-bound kernels (decode GEMVs). Each work-item sums its own contiguous span with float16
// loads: the pattern that reads fastest on PoCL (DEVICES.md); on GPUs, neighbouring work-items
// read neighbouring float4s.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench_commands.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"

namespace fp4cl::bench {

namespace {

const char* kStreamSource = R"CL(
__kernel void stream_spans(const __global float16* restrict data, __global float* restrict out, ulong per_item) {
  const size_t i = get_global_id(0);
  const __global float16* p = data + i * per_item;
  float16 a = (float16)(0.0f), b = (float16)(0.0f);
  for (ulong j = 0; j < per_item; j += 2) {
    a += p[j];
    b += p[j + 1];
  }
  const float16 s = a + b;
  out[i] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 + s.sa + s.sb + s.sc + s.sd + s.se + s.sf;
}
__kernel void stream_grid(const __global float4* restrict data, __global float* restrict out, ulong count) {
  float4 a = (float4)(0.0f);
  for (size_t j = get_global_id(0); j < count; j += get_global_size(0)) a += data[j];
  out[get_global_id(0)] = a.x + a.y + a.z + a.w;
}
)CL";

struct StreamArgs {
  double mib = 512;
  int items = 0;  // 0: per device kind
  int iters = 10;
};

void run_stream(const StreamArgs& a) {
  Context ctx = Context::create();
  const bool gpu = ctx.info().kind == DeviceKind::gpu;
  const std::size_t items = a.items > 0 ? static_cast<std::size_t>(a.items) : gpu ? 262144 : 16;
  const std::size_t bytes = static_cast<std::size_t>(a.mib * 1048576.0) / (items * 128) * (items * 128);
  if (bytes == 0) throw Error("--mib too small for the work-item count");
  cl_int err = CL_SUCCESS;
  cl::Program program(ctx.opencl_context(), std::string(kStreamSource), true, &err);
  if (err != CL_SUCCESS) throw Error("building the streaming kernels", err);
  cl::Kernel kernel(program, gpu ? "stream_grid" : "stream_spans", &err);
  cl::Buffer data(ctx.opencl_context(), CL_MEM_READ_ONLY, bytes, nullptr, &err);
  cl::Buffer out(ctx.opencl_context(), CL_MEM_WRITE_ONLY, items * sizeof(float), nullptr, &err);
  if (err != CL_SUCCESS) throw Error("allocating the streaming buffers", err);
  const float zero = 0.0f;
  ctx.queue().enqueueFillBuffer(data, zero, 0, bytes);
  kernel.setArg(0, data);
  kernel.setArg(1, out);
  if (gpu) kernel.setArg(2, static_cast<cl_ulong>(bytes / 16));
  else kernel.setArg(2, static_cast<cl_ulong>(bytes / 64 / items));
  std::vector<double> times;
  for (int it = 0; it < a.iters + 1; ++it) {
    cl::Event e;
    err = ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(items),
                                           gpu ? cl::NDRange(256) : cl::NDRange(1), nullptr, &e);
    if (err != CL_SUCCESS) throw Error("enqueueing the streaming kernel", err);
    e.wait();
    if (it == 0) continue;  // the first launch compiles for its local size
    cl_ulong t0 = 0, t1 = 0;
    e.getProfilingInfo(CL_PROFILING_COMMAND_START, &t0);
    e.getProfilingInfo(CL_PROFILING_COMMAND_END, &t1);
    times.push_back(static_cast<double>(t1 - t0) * 1e-9);
  }
  std::sort(times.begin(), times.end());
  fmt::print("device: {}\n", ctx.info().describe());
  fmt::print("stream read: {:.0f} MiB, {} work-items: {:.2f} GB/s (median), {:.2f} GB/s (best)\n",
             static_cast<double>(bytes) / 1048576.0, items, static_cast<double>(bytes) / times[times.size() / 2] * 1e-9,
             static_cast<double>(bytes) / times.front() * 1e-9);
}

}  // namespace

void register_stream(CLI::App& app) {
  auto a = std::make_shared<StreamArgs>();
  CLI::App* s = app.add_subcommand("stream", "the device's streaming-read bandwidth through OpenCL");
  s->add_option("--mib", a->mib, "buffer size in MiB")->check(CLI::Range(1.0, 4096.0));
  s->add_option("--items", a->items, "work-items (default: 16 on CPUs, 262144 on GPUs)")->check(CLI::Range(0, 1 << 24));
  s->add_option("--iters", a->iters, "timed iterations")->check(CLI::Range(1, 1000));
  s->callback([a] { run_stream(*a); });
}

}  // namespace fp4cl::bench
