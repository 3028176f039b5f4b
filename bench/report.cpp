#include "report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace fp4cl::bench {

namespace {

double per_second(double amount, double us) { return us > 0 ? amount / (us * 1e-6) : 0.0; }

// CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string percent(double fraction) { return fraction > 0 ? fmt::format("{:.0f}%", fraction * 100.0) : "-"; }

}  // namespace

double Row::tokens_per_second() const { return per_second(static_cast<double>(tokens), timing.median_us); }
double Row::gbps() const { return per_second(weight_bytes, timing.median_us) * 1e-9; }
double Row::gflops() const { return per_second(flops, timing.median_us) * 1e-9; }

double Report::bandwidth_fraction(const Row& r) const {
  return peaks.stream.gbps > 0 ? r.gbps() / peaks.stream.gbps : 0.0;
}
double Report::fma_fraction(const Row& r) const { return peaks.fma.gflops > 0 ? r.gflops() / peaks.fma.gflops : 0.0; }

std::string format_table(const Report& report) {
  const std::vector<std::string> head = {"#",      "op",     "shape",  "scheme",  "T",       "kernel", "us med",
                                         "us min", "wall us", "tok/s", "MB",      "GB/s",    "%BW",    "GFLOP/s",
                                         "%FMA",   "check"};
  std::vector<std::vector<std::string>> cells;
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const Row& r = report.rows[i];
    cells.push_back({std::to_string(i + 1), r.op, r.shape, r.scheme, std::to_string(r.tokens), r.kernel,
                     fmt::format("{:.1f}", r.timing.median_us), fmt::format("{:.1f}", r.timing.min_us),
                     fmt::format("{:.1f}", r.timing.wall_median_us), fmt::format("{:.0f}", r.tokens_per_second()),
                     fmt::format("{:.2f}", r.weight_bytes * 1e-6), fmt::format("{:.2f}", r.gbps()),
                     percent(report.bandwidth_fraction(r)), r.flops > 0 ? fmt::format("{:.1f}", r.gflops()) : "-",
                     r.flops > 0 ? percent(report.fma_fraction(r)) : "-", r.check});
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t c = 0; c < v.size(); ++c) {
      const bool left = c >= 1 && c <= 5;  // text columns
      s += (c ? "  " : "") + (left ? fmt::format("{:<{}}", v[c], width[c]) : fmt::format("{:>{}}", v[c], width[c]));
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = fmt::format("{}\ndevice: {}\npeaks (this run): {}\n\n", report.title, report.device,
                                report.peaks.describe());
  out += line(head);
  for (const auto& row : cells) out += line(row);
  out += "\nkernels and reproduction:\n";
  for (std::size_t i = 0; i < report.rows.size(); ++i)
    out += fmt::format("  {:>2}  {}\n      $ {}\n", i + 1, report.rows[i].detail, report.rows[i].command);
  return out;
}

std::string format_csv(const Report& report) {
  std::string out =
      "op,shape,scheme,tokens,kernel,us_median,us_min,wall_us_median,wall_us_min,iterations,warmup_calls,"
      "tokens_per_s,weight_bytes,gbps,bandwidth_fraction,stream_gbps,gflops,fma_fraction,fma_gflops,check,detail,"
      "command\n";
  for (const Row& r : report.rows) {
    out += fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{:.1f},{:.0f},{:.4f},{:.4f},{:.3f},{:.4f},"
                       "{:.4f},{:.3f},{},{},{}\n",
                       r.op, csv_field(r.shape), r.scheme, r.tokens, csv_field(r.kernel), r.timing.median_us,
                       r.timing.min_us, r.timing.wall_median_us, r.timing.wall_min_us, r.timing.iterations,
                       r.timing.warmup_calls, r.tokens_per_second(), r.weight_bytes, r.gbps(),
                       report.bandwidth_fraction(r), report.peaks.stream.gbps, r.gflops(), report.fma_fraction(r),
                       report.peaks.fma.gflops, csv_field(r.check), csv_field(r.detail), csv_field(r.command));
  }
  return out;
}

std::string format_json(const Report& report) {
  nlohmann::json j;
  j["title"] = report.title;
  j["device"] = report.device;
  j["peaks"] = {{"stream_gbps", report.peaks.stream.gbps},
                {"stream_work_items", report.peaks.stream.items},
                {"stream_local_size", report.peaks.stream.local},
                {"stream_bytes", report.peaks.stream.bytes},
                {"stream_huge_page_bytes", report.peaks.stream.huge_page_bytes},
                {"stream_probes", report.peaks.stream.probes},
                {"fma_gflops", report.peaks.fma.gflops},
                {"fma_work_items", report.peaks.fma.items}};
  j["rows"] = nlohmann::json::array();
  for (const Row& r : report.rows) {
    j["rows"].push_back({{"op", r.op},
                         {"shape", r.shape},
                         {"scheme", r.scheme},
                         {"tokens", r.tokens},
                         {"kernel", r.kernel},
                         {"detail", r.detail},
                         {"us_median", r.timing.median_us},
                         {"us_min", r.timing.min_us},
                         {"wall_us_median", r.timing.wall_median_us},
                         {"wall_us_min", r.timing.wall_min_us},
                         {"iterations", r.timing.iterations},
                         {"warmup_calls", r.timing.warmup_calls},
                         {"tokens_per_s", r.tokens_per_second()},
                         {"weight_bytes", r.weight_bytes},
                         {"gbps", r.gbps()},
                         {"bandwidth_fraction", report.bandwidth_fraction(r)},
                         {"flops", r.flops},
                         {"gflops", r.gflops()},
                         {"fma_fraction", report.fma_fraction(r)},
                         {"check", r.check},
                         {"command", r.command}});
  }
  return j.dump(2) + "\n";
}

}  // namespace fp4cl::bench
