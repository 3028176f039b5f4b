#include "bench_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench_context.hpp"
#include "device_peaks.hpp"
#include "fp4cl/error.hpp"
#include "svg_plot.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::bench {

void add_run_options(CLI::App* cmd, RunOptions& o, std::vector<std::int64_t> default_tokens,
                     std::vector<std::string> default_schemes) {
  o.tokens = std::move(default_tokens);
  o.schemes = std::move(default_schemes);
  cmd->add_option("--tokens", o.tokens, "token counts per call, e.g. 1,8,64,512")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--scheme", o.schemes, "nvfp4-w4a16, nvfp4-w4a4, mxfp4-w4a16, mxfp4-w4a4 (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--kernel", o.kernels, "kernel strategies to time (comma-separated, or 'all'; default: automatic)")
      ->delimiter(',');
  cmd->add_option("--iters", o.iters, "timed calls per row")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed calls per row first (at least one per weight copy)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--warmup-ms", o.warmup_ms,
                  "and untimed calls until this many milliseconds have passed (a VM runs its first tens of ms slower)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  cmd->add_flag("--no-check", o.no_check, "skip the check against the scalar reference");
  cmd->add_flag("--launches", o.launches,
                "print each row's commands on stderr: median start (from the call's first command) and duration "
                "(MoE: timed again in calls with an event on every launch, whose host time can widen the gaps "
                "between commands; the row keeps the time without them)");
  cmd->add_option("--rotate-mib", o.rotate_mib, "weights to cycle through between two uses of one copy (MiB)")
      ->check(CLI::Range(0.0, 65536.0));
  cmd->add_option("--stream-mib", o.stream_mib, "buffer of the streaming-read probe (MiB)")
      ->check(CLI::Range(1.0, 4096.0))
      ->capture_default_str();
  CLI::Option* csv = cmd->add_flag("--csv", o.csv, "print CSV instead of the table");
  CLI::Option* json = cmd->add_flag("--json", o.json, "print JSON instead of the table");
  csv->excludes(json);
  cmd->add_option("--plot", o.plot, "write an SVG chart of throughput vs tokens with the roofline");
}

std::vector<QuantScheme> parse_schemes(const std::vector<std::string>& names) {
  if (names.empty()) throw Error("--scheme: no scheme given");
  std::vector<QuantScheme> out;
  for (const std::string& n : names) {
    QuantScheme s;
    if (!tuning::parse_scheme_key(n, s))
      throw Error("unknown --scheme '" + n + "'; schemes: nvfp4-w4a16, nvfp4-w4a4, mxfp4-w4a16, mxfp4-w4a4");
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> resolve_kernels(const std::vector<std::string>& requested, const std::vector<std::string>& valid,
                                         const char* what) {
  if (requested.empty()) return {""};
  std::string names;
  for (const std::string& v : valid) names += (names.empty() ? "" : ", ") + v;
  std::vector<std::string> out;
  for (const std::string& r : requested) {
    if (r == "all") {
      for (const std::string& v : valid)
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
      continue;
    }
    if (std::find(valid.begin(), valid.end(), r) == valid.end())
      throw Error(fmt::format("unknown --kernel '{}'; {} kernels: {} (or 'all')", r, what, names));
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

bool expanded_from_all(const std::vector<std::string>& requested, const std::string& kernel) {
  return std::find(requested.begin(), requested.end(), "all") != requested.end() &&
         std::find(requested.begin(), requested.end(), kernel) == requested.end();
}

double rotation_bytes(const Context& ctx, const RunOptions& o) {
  if (o.rotate_mib > 0) return o.rotate_mib * 1048576.0;
  return 2.0 * static_cast<double>(last_level_cache_bytes(ctx));
}

std::size_t copies_for_rotation(double rotation, double bytes_per_copy, std::size_t limit) {
  if (bytes_per_copy <= 0) return 1;
  const double n = std::ceil(rotation / bytes_per_copy);
  return static_cast<std::size_t>(std::clamp(n, 1.0, static_cast<double>(std::max<std::size_t>(limit, 1))));
}

std::string command_prefix(const std::string& subcommand) {
  const std::string& device = device_selector();
  return device.empty() ? "fp4cl-bench " + subcommand : fmt::format("fp4cl-bench --device '{}' {}", device, subcommand);
}

Warmup row_warmup(const RunOptions& o, std::size_t copies) {
  return per_copy(Warmup{o.warmup, o.warmup_ms}, copies);
}

std::string common_command_options(const RunOptions& o) {
  std::string s = fmt::format(" --iters {} --warmup {}", o.iters, o.warmup);
  if (o.warmup_ms != RunOptions{}.warmup_ms) s += fmt::format(" --warmup-ms {}", o.warmup_ms);
  if (o.rotate_mib > 0) s += fmt::format(" --rotate-mib {}", o.rotate_mib);
  if (o.stream_mib != 512) s += fmt::format(" --stream-mib {}", o.stream_mib);
  if (o.no_check) s += " --no-check";
  return s;
}

void emit_report(const Report& report, const RunOptions& o) {
  if (o.csv) fmt::print("{}", format_csv(report));
  else if (o.json) fmt::print("{}", format_json(report));
  else fmt::print("{}", format_table(report));
  if (!o.plot.empty()) {
    write_roofline_svg(report, o.plot);
    fmt::print(stderr, "plot written to {}\n", o.plot);
  }
}

}  // namespace fp4cl::bench
