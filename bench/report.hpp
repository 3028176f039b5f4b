// Benchmark results: one row per (layer shape, scheme, kernel, token count), with the metrics
// derived from its timing and the device peaks measured in the same run, written as a human
// table (default), CSV or JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_peaks.hpp"
#include "timing.hpp"

namespace fp4cl::bench {

struct Row {
  std::string op;      // "linear" | "moe" | "quant"
  std::string shape;   // "4096x4096", "qwen3-30b-a3b (H=2048 I=768 E=128 k=8)", ...
  std::string series;  // what a plot line joins: shape, scheme and kernel
  std::string scheme;  // "nvfp4-w4a16", ...
  std::string kernel;  // the strategy that served the calls
  std::string detail;  // its tuning, as the layer describes it
  std::int64_t tokens = 0;
  Timing timing;
  double weight_bytes = 0.0;  // bytes of weights (or, for quant, data) one call streams
  double flops = 0.0;         // floating-point operations of one call (0: not meaningful)
  std::string check;          // "ok (worst error 0.42 of bound)", "skipped (--no-check)"
  std::string command;        // reproduces this row

  // From the median event time.
  double tokens_per_second() const;
  double gbps() const;
  double gflops() const;
};

struct Report {
  std::string title;   // "fp4cl-bench linear"
  std::string device;  // DeviceInfo::describe()
  DevicePeaks peaks;   // measured in this run
  std::vector<Row> rows;

  double bandwidth_fraction(const Row& r) const;  // of peaks.stream.gbps
  double fma_fraction(const Row& r) const;        // of peaks.fma.gflops
};

std::string format_table(const Report& report);
std::string format_csv(const Report& report);
std::string format_json(const Report& report);

}  // namespace fp4cl::bench
