// One measuring run of a subcommand: the device peaks measured before the rows and again after
// them, the streaming read also after each row (the report quotes the highest of each, so that a
// fraction of peak is never flattered by a momentarily loaded machine), a progress bar on stderr
// while rows are measured, and the report printed at the end.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bench_options.hpp"
#include "fp4cl/context.hpp"
#include "report.hpp"

namespace fp4cl::cli {
class ProgressBar;
}

namespace fp4cl::bench {

class BenchRun {
 public:
  BenchRun(const Context& ctx, std::string title, std::size_t total_rows, const RunOptions& options);
  ~BenchRun();

  void add(Row row);
  // A planned row that will not be measured (a kernel of `--kernel all` that cannot serve it).
  void skip();
  // Measures the peaks again, prints the report and writes --plot.
  void finish();

  const Report& report() const { return report_; }

 private:
  Context ctx_;
  RunOptions options_;
  Report report_;
  std::size_t total_, done_ = 0;
  std::unique_ptr<cli::ProgressBar> progress_;
};

}  // namespace fp4cl::bench
