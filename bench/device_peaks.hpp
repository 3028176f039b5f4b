// The device's yardsticks, measured in the same run as the benchmarks they judge (the machine may
// be shared, and its figures vary run to run):
//   - streaming read: each work-item sums its own contiguous span with float16 loads (CPUs: 1, 4
//     and 16 work-items per compute unit), or neighbouring work-items read neighbouring float4s in
//     a grid loop (GPUs), over a buffer far larger than the last-level cache, allocated as fp4cl
//     allocates its layers' buffers (on CPU devices: huge pages, cl/huge_page_memory.hpp); the
//     configurations take turns, one launch each per round, and the best median wins. A run
//     measures it again after each row and keeps the highest (bench_run.hpp);
//   - fp32 FMA peak: 8 independent float16 FMA chains per work-item (DEVICES.md; they fit
//     AVX-512's 32 vector registers) and 4 (AVX2's 16 registers hold 4 float16 = 8 ymm chains, 8
//     would spill): the best median over both and a few work-item counts.
#pragma once

#include <string>
#include <vector>

#include "fp4cl/context.hpp"

namespace fp4cl::bench {

struct StreamConfig {
  std::size_t items = 0, local = 1;  // work-items, local size
};

struct StreamResult {
  double gbps = 0.0;  // best median over the configurations tried
  std::size_t items = 0, local = 1, bytes = 0;  // the best configuration's work-items and local size
  struct ConfigMedian {
    StreamConfig config;
    double gbps = 0.0;
  };
  std::vector<ConfigMedian> per_config;         // each configuration tried and its median
  std::size_t huge_page_bytes = 0;              // of the buffer's bytes, those on huge pages (0: none, or unknown)
  int probes = 1;                               // measurements this figure is the highest of
  // "41.2 GB/s (16 work-items in groups of 1, 512 MiB, 100 % on huge pages; the highest of 5 probes)"
  std::string describe() const;
};

// The higher of two stream measurements, counting the probes behind it.
StreamResult highest(const StreamResult& a, const StreamResult& b);

struct FmaResult {
  double gflops = 0.0;  // best median over the work-item counts and chain counts tried
  std::size_t items = 0;
  int chains = 0;
};

// `mib`: buffer size; 0 = 512 MiB (capped by the device's largest allocation).
StreamResult measure_stream_read(const Context& ctx, double mib = 0, int iters = 5, std::size_t items = 0);
FmaResult measure_fma_peak(const Context& ctx, int iters = 5, std::size_t items = 0);

// Both, as a benchmark's header quotes them.
struct DevicePeaks {
  StreamResult stream;
  FmaResult fma;
  std::string describe() const;  // "stream read 41.2 GB/s (16 work-items), fp32 FMA 402 GFLOP/s (32 work-items)"
};
DevicePeaks measure_peaks(const Context& ctx, double stream_mib = 0);

// The device's last-level cache in bytes as OpenCL reports it (CL_DEVICE_GLOBAL_MEM_CACHE_SIZE),
// at least 32 MiB on CPUs (PoCL reports one core's L2 on some machines).
std::size_t last_level_cache_bytes(const Context& ctx);

}  // namespace fp4cl::bench
