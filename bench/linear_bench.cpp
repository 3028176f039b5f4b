// fp4cl-bench linear: times one FP4 linear layer with OpenCL event profiling after checking it
// against the scalar reference.
//
//   fp4cl-bench linear -m 1 -n 4096 -k 4096 --scheme nvfp4-w4a16 [--kernel gemv_rows] [--iters 50]
//
// Decode shapes are reported in GB/s of weights streamed (codes + block scales), prefill shapes
// in GFLOP/s (2·m·n·k). Layers whose weights fit in the last-level cache would be timed from the
// cache, so the benchmark cycles through enough copies of the layer (different weights) to stream
// at least --stream-mib MiB per round.
#include <CLI/CLI.hpp>
#include <sys/resource.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "common/formats.cl"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "reference/linear_reference.hpp"
#include "bench_commands.hpp"

namespace fp4cl::bench {

namespace {

struct Args {
  std::int64_t m = 1, n = 4096, k = 4096;
  std::string scheme = "nvfp4-w4a16", kernel, output = "bf16";
  int iters = 30, warmup = 3;
  double stream_mib = 96;
  int check_samples = 512;
  std::vector<std::string> tune;  // NAME=VALUE
};

QuantScheme parse_scheme(const std::string& s) {
  if (s == "nvfp4-w4a16") return {WeightFormat::nvfp4, Activations::bf16};
  if (s == "nvfp4-w4a4") return {WeightFormat::nvfp4, Activations::fp4_dynamic};
  if (s == "mxfp4-w4a16") return {WeightFormat::mxfp4, Activations::bf16};
  if (s == "mxfp4-w4a4") return {WeightFormat::mxfp4, Activations::fp4_dynamic};
  throw Error("unknown --scheme '" + s + "' (nvfp4-w4a16, nvfp4-w4a4, mxfp4-w4a16, mxfp4-w4a4)");
}

Fp4Weight make_weight(WeightFormat format, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Fp4Weight w;
  w.format = format;
  w.n = n;
  w.k = k;
  const std::int64_t block = block_size(format);
  w.packed.resize(static_cast<std::size_t>(n * k / 2));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w.packed) b = static_cast<std::uint8_t>(byte(rng));
  w.scales.resize(static_cast<std::size_t>(n * (k / block)));
  std::uniform_int_distribution<int> nv(0x20, 0x48), mx(118, 126);
  for (auto& s : w.scales) s = static_cast<std::uint8_t>(format == WeightFormat::nvfp4 ? nv(rng) : mx(rng));
  if (format == WeightFormat::nvfp4) {
    w.global_scale = 1.0f / 2688.0f;
    w.set_input_scales_from_quant(2688.0f / 8.0f);
  }
  return w;
}

std::vector<std::uint16_t> make_activations(std::int64_t m, std::int64_t k, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
  for (auto& v : x) v = static_cast<std::uint16_t>(float_to_bf16(normal(rng)));
  return x;
}

// CPU seconds used by this process so far (PoCL runs kernels on threads of this process): on a
// shared machine this measures the work a call costs, which wall time does not.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double seconds(const cl::Event& e, cl_profiling_info what) {
  cl_ulong t = 0;
  if (e.getProfilingInfo(what, &t) != CL_SUCCESS) throw Error("reading an event's profiling time");
  return static_cast<double>(t) * 1e-9;
}

// Checks a sample of outputs against the reference (error bound as in tests/linear).
void check(const Args& a, const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
           Linear& layer) {
  std::vector<float> y;
  std::vector<std::uint16_t> y16;
  if (layer.options().output == OutputType::fp32) {
    layer.run(x, a.m, y);
  } else {
    layer.run(x, a.m, y16);
    for (std::uint16_t v : y16) y.push_back(bf16_to_float(v));
  }
  const reference::LinearReference ref(scheme, w, x.data(), a.m);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> token(0, a.m - 1), row(0, a.n - 1);
  double worst = 0.0;
  for (int s = 0; s < a.check_samples; ++s) {
    const std::int64_t i = token(rng), r = row(rng);
    const reference::LinearOutput o = ref.at(i, r);
    const double u = std::ldexp(1.0, -24), g = static_cast<double>(a.k + 2) * u;
    double bound = g * o.abs_terms;
    if (layer.options().output == OutputType::bf16)
      bound += std::ldexp(1.0, std::ilogb(std::fabs(o.y) + bound + 1e-30) - 8);
    const double err = std::fabs(static_cast<double>(y[static_cast<std::size_t>(i * a.n + r)]) - o.y);
    worst = std::max(worst, err / bound);
    if (err > bound)
      throw Error(fmt::format("check failed: y[{}, {}] = {}, reference {} (bound {})", i, r,
                              y[static_cast<std::size_t>(i * a.n + r)], o.y, bound));
  }
  fmt::print("check: {} sampled outputs within bounds (worst error/bound {:.3f})\n", a.check_samples, worst);
}

void run_linear(const Args& a) {
  const QuantScheme scheme = parse_scheme(a.scheme);
  Context ctx = Context::create();
  if (!ctx.profiling_enabled()) throw Error("the context's queue has no profiling");
  LinearOptions options;
  options.max_tokens = a.m;
  options.kernel = a.kernel;
  for (const std::string& t : a.tune) {
    const auto eq = t.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("--tune takes NAME=VALUE, got '" + t + "'");
    options.tuning[t.substr(0, eq)] = std::stoll(t.substr(eq + 1));
  }
  if (a.output != "bf16" && a.output != "fp32") throw Error("--output must be bf16 or fp32");
  options.output = a.output == "bf16" ? OutputType::bf16 : OutputType::fp32;

  std::vector<Fp4Weight> weights;
  std::vector<Linear> layers;
  weights.push_back(make_weight(scheme.weight, a.n, a.k, 1));
  layers.push_back(Linear::create(ctx, weights[0], scheme, options));
  const std::uint64_t bytes = layers[0].weight_bytes();
  const auto copies = static_cast<std::size_t>(
      std::clamp(std::ceil(a.stream_mib * 1048576.0 / static_cast<double>(bytes)), 1.0, 64.0));
  for (std::size_t c = 1; c < copies; ++c) {
    Fp4Weight w = make_weight(scheme.weight, a.n, a.k, static_cast<std::uint32_t>(c + 1));
    layers.push_back(Linear::create(ctx, w, scheme, options));
  }
  fmt::print("device: {}\nlayer: {}\n", ctx.info().describe(), layers[0].describe());
  fmt::print("weights: {:.2f} MiB per layer, {} copies cycled\n", static_cast<double>(bytes) / 1048576.0, copies);

  const std::vector<std::uint16_t> x = make_activations(a.m, a.k, 99);
  if (a.check_samples > 0) check(a, scheme, weights[0], x, layers[0]);

  cl_int err = CL_SUCCESS;
  cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                const_cast<std::uint16_t*>(x.data()), &err);
  const std::size_t y_bytes = static_cast<std::size_t>(a.m * a.n) * (options.output == OutputType::bf16 ? 2 : 4);
  cl::Buffer yb(ctx.opencl_context(), CL_MEM_READ_WRITE, y_bytes, nullptr, &err);
  if (err != CL_SUCCESS) throw Error("allocating the benchmark buffers", err);

  std::vector<double> times, matmul_times;
  double cpu_start = 0.0;
  for (int it = 0; it < a.warmup + a.iters; ++it) {
    if (it == a.warmup) cpu_start = cpu_seconds();
    Linear& layer = layers[static_cast<std::size_t>(it) % copies];
    layer.enqueue(xb, yb, a.m);
    ctx.queue().finish();
    if (it < a.warmup) continue;
    const auto& ev = layer.last_events();
    times.push_back(seconds(ev.back(), CL_PROFILING_COMMAND_END) - seconds(ev.front(), CL_PROFILING_COMMAND_START));
    matmul_times.push_back(seconds(ev.back(), CL_PROFILING_COMMAND_END) -
                           seconds(ev.back(), CL_PROFILING_COMMAND_START));
  }
  const double cpu_per_call = (cpu_seconds() - cpu_start) / a.iters;
  std::sort(times.begin(), times.end());
  std::sort(matmul_times.begin(), matmul_times.end());
  const double median = times[times.size() / 2], best = times.front();
  const double mm_median = matmul_times[matmul_times.size() / 2];
  const double flops = 2.0 * static_cast<double>(a.m) * static_cast<double>(a.n) * static_cast<double>(a.k);
  fmt::print("kernel: {}\n", layers[0].kernel_name(a.m));
  fmt::print("time: median {:.1f} us, best {:.1f} us (matmul alone: median {:.1f} us) over {} iterations\n",
             median * 1e6, best * 1e6, mm_median * 1e6, a.iters);
  fmt::print("weights streamed: {:.2f} GB/s (median), {:.2f} GB/s (best)\n", static_cast<double>(bytes) / median * 1e-9,
             static_cast<double>(bytes) / best * 1e-9);
  fmt::print("compute: {:.1f} GFLOP/s (median), {:.1f} GFLOP/s (best)\n", flops / median * 1e-9, flops / best * 1e-9);
  fmt::print("cpu: {:.1f} us of CPU time per call: {:.2f} GB/s, {:.1f} GFLOP/s per CPU-second\n", cpu_per_call * 1e6,
             static_cast<double>(bytes) / cpu_per_call * 1e-9, flops / cpu_per_call * 1e-9);
}

}  // namespace

void register_linear(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* lin = app.add_subcommand("linear", "time one FP4 linear layer (checked against the reference first)");
  lin->add_option("-m", a->m, "tokens")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  lin->add_option("-n", a->n, "output features")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  lin->add_option("-k", a->k, "input features")->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 20));
  lin->add_option("--scheme", a->scheme, "nvfp4-w4a16 | nvfp4-w4a4 | mxfp4-w4a16 | mxfp4-w4a4");
  lin->add_option("--kernel", a->kernel, "force a kernel strategy (default: FP4CL_LINEAR_KERNEL, else automatic)");
  lin->add_option("--output", a->output, "bf16 | fp32");
  lin->add_option("--iters", a->iters, "timed iterations")->check(CLI::Range(1, 100000));
  lin->add_option("--warmup", a->warmup, "untimed iterations first")->check(CLI::Range(0, 1000));
  lin->add_option("--stream-mib", a->stream_mib, "cycle through layer copies until this many MiB of weights");
  lin->add_option("--tune", a->tune, "a tuning parameter NAME=VALUE (repeatable), e.g. GEMV_LOCAL=4");
  lin->add_option("--check-samples", a->check_samples, "outputs checked against the reference (0: no check)")
      ->check(CLI::Range(0, 1000000));
  lin->callback([a] { run_linear(*a); });
}

}  // namespace fp4cl::bench

