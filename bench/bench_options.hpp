// The options the measuring subcommands (linear, moe, quant) share, and what they do with a
// finished report: print it as a table, CSV or JSON, and draw it with --plot.
//
//   --tokens 1,8,64,512    token counts per call (a sweep)
//   --scheme LIST          nvfp4-w4a16, nvfp4-w4a4, mxfp4-w4a16, mxfp4-w4a4 (comma-separated)
//   --kernel LIST|all      strategies to time (default: the layer's own choice per call)
//   --iters N --warmup N   timed and untimed calls per row
//   --warmup-ms MS         and untimed calls until MS milliseconds have passed (default 200:
//                          a VM's first tens of ms of calls are slow, timing.hpp's Warmup)
//   --no-check             skip the check against the scalar reference before timing
//   --rotate-mib N         cycle through copies of the weights so that at least N MiB stream
//                          between two uses of one copy (default: twice the last-level cache)
//   --stream-mib N         buffer of the streaming-read probe (default 512; far larger than the
//                          last-level cache)
//   --csv | --json         machine-readable output instead of the table
//   --plot FILE.svg        throughput vs tokens with the roofline
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/scheme.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace fp4cl::bench {

struct RunOptions {
  std::vector<std::int64_t> tokens;
  std::vector<std::string> schemes;
  std::vector<std::string> kernels;
  int iters = 20, warmup = 2;
  double warmup_ms = 200;
  bool no_check = false, csv = false, json = false;
  bool launches = false;  // print each row's per-command breakdown on stderr
  std::string plot;
  double rotate_mib = 0;
  double stream_mib = 512;
};

// Adds the options above to `cmd` with the subcommand's default tokens and schemes.
void add_run_options(CLI::App* cmd, RunOptions& o, std::vector<std::int64_t> default_tokens,
                     std::vector<std::string> default_schemes);

// The schemes of --scheme; throws fp4cl::Error naming a bad one and the valid names.
std::vector<QuantScheme> parse_schemes(const std::vector<std::string>& names);

// The strategies of --kernel: {""} (automatic) when none was given, every valid name for "all";
// throws fp4cl::Error for an unknown name, listing the valid ones.
std::vector<std::string> resolve_kernels(const std::vector<std::string>& requested, const std::vector<std::string>& valid,
                                         const char* what);
// Whether `kernel` is in the run only through "all" among `requested` (not named itself): such a
// kernel that cannot serve a case is skipped with a note instead of failing the run.
bool expanded_from_all(const std::vector<std::string>& requested, const std::string& kernel);

// Bytes the weights of a timed row should span before a copy is reused (--rotate-mib, else twice
// the device's last-level cache).
double rotation_bytes(const Context& ctx, const RunOptions& o);

// How many copies of `bytes_per_copy` bytes make `rotation_bytes` (at least 1, at most `limit`).
std::size_t copies_for_rotation(double rotation_bytes, double bytes_per_copy, std::size_t limit);

// The start of a reproduction command: "fp4cl-bench [--device SELECTOR] <subcommand>".
std::string command_prefix(const std::string& subcommand);

// The warm-up of a row that reads `copies` copies of its weights: at least one call per copy.
Warmup row_warmup(const RunOptions& o, std::size_t copies = 1);

// The options that a row's reproduction repeats: " --iters N --warmup N" (--warmup-ms where not
// the default) and --no-check.
std::string common_command_options(const RunOptions& o);

// Prints the report in the chosen format on stdout and writes --plot.
void emit_report(const Report& report, const RunOptions& o);

}  // namespace fp4cl::bench
