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
}

BenchRun::~BenchRun() = default;

void BenchRun::add(Row row) {
  report_.rows.push_back(std::move(row));
  ++done_;
  progress_->update("measuring", done_, total_);
}

void BenchRun::skip() {
  ++done_;
  progress_->update("measuring", done_, total_);
}

void BenchRun::finish() {
  const DevicePeaks after = measure_peaks(ctx_, options_.stream_mib);
  if (after.stream.gbps > report_.peaks.stream.gbps) report_.peaks.stream = after.stream;
  if (after.fma.gflops > report_.peaks.fma.gflops) report_.peaks.fma = after.fma;
  progress_->finish();
  emit_report(report_, options_);
}

}  // namespace fp4cl::bench
