// fp4cl-bench stream: the device's streaming-read bandwidth through OpenCL, the yardstick of the
// bandwidth-bound kernels (decode GEMVs), and with --fma the fp32 FMA peak (device_peaks.hpp).
//
//   fp4cl-bench stream [--mib 512] [--items N] [--iters 10] [--probes 1] [--fma]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "device_peaks.hpp"

namespace fp4cl::bench {

namespace {

struct StreamArgs {
  double mib = 512;
  std::size_t items = 0;  // 0: a few counts per device kind, the best reported
  int iters = 10;
  int probes = 1;
  bool fma = false;
};

void run_stream(const StreamArgs& a) {
  Context ctx = bench_context();
  fmt::print("device: {}\n", ctx.info().describe());
  StreamResult s;
  for (int p = 0; p < a.probes; ++p) {
    const StreamResult one = measure_stream_read(ctx, a.mib, a.iters, a.items);
    std::string each;
    for (const auto& m : one.per_config)
      each += fmt::format("{}{} x {}: {:.2f}", each.empty() ? "" : ", ", m.config.items, m.config.local, m.gbps);
    fmt::print("probe {}: {} (medians of {}, GB/s: {})\n", p + 1, one.describe(), a.iters, each);
    s = p == 0 ? one : highest(s, one);
  }
  fmt::print("stream read: {}\n", s.describe());
  if (a.fma) {
    const FmaResult f = measure_fma_peak(ctx, a.iters);
    fmt::print("fp32 FMA: {} work-items x {} float16 chains: {:.1f} GFLOP/s (median of {})\n", f.items, f.chains,
               f.gflops, a.iters);
  }
}

}  // namespace

void register_stream(CLI::App& app) {
  auto a = std::make_shared<StreamArgs>();
  CLI::App* s = app.add_subcommand("stream", "the device's streaming-read bandwidth (and fp32 FMA peak with --fma)");
  s->add_option("--mib", a->mib, "buffer size in MiB")->check(CLI::Range(1.0, 4096.0));
  s->add_option("--items", a->items, "work-items (default: try a few, report the best)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 24));
  s->add_option("--iters", a->iters, "timed iterations of each configuration")->check(CLI::Range(1, 1000));
  s->add_option("--probes", a->probes, "measurements, each on a fresh buffer; the highest is reported")
      ->check(CLI::Range(1, 100));
  s->add_flag("--fma", a->fma, "also measure the fp32 FMA peak");
  s->callback([a] { run_stream(*a); });
}

}  // namespace fp4cl::bench
