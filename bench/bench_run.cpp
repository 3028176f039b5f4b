#include "bench_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "device_peaks.hpp"
#include "fp4cl/progress.hpp"

namespace fp4cl::bench {

BenchRun::BenchRun(const Context& ctx, std::string title, std::size_t total_rows, const RunOptions& options)
    : ctx_(ctx), options_(options), total_(total_rows) {
  report_.title = std::move(title);
  report_.device = ctx.info().describe();
  progress_ = std::make_unique<cli::ProgressBar>(::isatty(STDERR_FILENO) == 1, cli::ProgressUnit::items);
  progress_->update("measuring", 0, total_);
  report_.peaks = measure_peaks(ctx, options.stream_mib);
  // Two more stream probes before the rows: the machine's memory alternates between a slow and a
  // fast state within seconds (bench/README.md), and the yardstick is the fast one.
  for (int i = 0; i < 2; ++i)
    report_.peaks.stream = highest(report_.peaks.stream, measure_stream_read(ctx, options.stream_mib));
}

BenchRun::~BenchRun() = default;

void BenchRun::add(Row row) {
  report_.rows.push_back(std::move(row));
  // The machine's other work comes and goes within a run: the stream read is measured again after
  // each row, and the run's yardstick is the highest (its rows' fractions are of that).
  report_.peaks.stream = highest(report_.peaks.stream, measure_stream_read(ctx_, options_.stream_mib));
  ++done_;
  progress_->update("measuring", done_, total_);
}

void BenchRun::skip() {
  ++done_;
  progress_->update("measuring", done_, total_);
}

void BenchRun::finish() {
  const DevicePeaks after = measure_peaks(ctx_, options_.stream_mib);
  report_.peaks.stream = highest(report_.peaks.stream, after.stream);
  if (after.fma.gflops > report_.peaks.fma.gflops) report_.peaks.fma = after.fma;
  progress_->finish();
  emit_report(report_, options_);
}

}  // namespace fp4cl::bench
