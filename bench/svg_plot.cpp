#include "svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <vector>

#include "fp4cl/error.hpp"

namespace fp4cl::bench {

namespace {

constexpr double kWidth = 900, kHeight = 560, kLeft = 80, kRight = 300, kTop = 50, kBottom = 60;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Axes {
  double x0, x1, y0, y1;  // log2 tokens and log10 tokens/s ranges
  double x(double tokens) const {
    return kLeft + (std::log2(tokens) - x0) / (x1 - x0) * (kWidth - kLeft - kRight);
  }
  double y(double rate) const {
    return kHeight - kBottom - (std::log10(rate) - y0) / (y1 - y0) * (kHeight - kTop - kBottom);
  }
};

// The roofline of a row: tokens/s the peaks allow for its bytes and flops per call.
double roof(const Report& report, const Row& r) {
  const double t = static_cast<double>(r.tokens);
  double best = 1e300;
  if (r.weight_bytes > 0 && report.peaks.stream.gbps > 0) best = std::min(best, report.peaks.stream.gbps * 1e9 * t / r.weight_bytes);
  if (r.flops > 0 && report.peaks.fma.gflops > 0) best = std::min(best, report.peaks.fma.gflops * 1e9 * t / r.flops);
  return best;
}

}  // namespace

std::string roofline_svg(const Report& report) {
  std::vector<const Row*> rows;
  for (const Row& r : report.rows)
    if (r.timing.median_us > 0 && r.tokens > 0) rows.push_back(&r);
  if (rows.empty()) return {};
  double tmin = 1e300, tmax = 0, rmin = 1e300, rmax = 0;
  for (const Row* r : rows) {
    tmin = std::min(tmin, static_cast<double>(r->tokens));
    tmax = std::max(tmax, static_cast<double>(r->tokens));
    rmin = std::min(rmin, r->tokens_per_second());
    rmax = std::max(rmax, r->tokens_per_second());
    const double rf = roof(report, *r);
    if (rf < 1e299) rmax = std::max(rmax, rf);
  }
  Axes ax{std::floor(std::log2(tmin)), std::ceil(std::log2(tmax)), std::floor(std::log10(rmin)),
          std::ceil(std::log10(rmax))};
  if (ax.x1 <= ax.x0) ax.x1 = ax.x0 + 1;
  if (ax.y1 <= ax.y0) ax.y1 = ax.y0 + 1;

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}</text>\n"
      "<text x=\"{2}\" y=\"40\" font-size=\"11\" fill=\"#555\">{4}; {5}</text>\n",
      kWidth, kHeight, kLeft, xml_escape(report.title + ": throughput vs tokens per call"), xml_escape(report.device),
      xml_escape(report.peaks.describe()));
  const double plot_right = kWidth - kRight, plot_bottom = kHeight - kBottom;
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
                     kTop, plot_right - kLeft, plot_bottom - kTop);
  for (double e = ax.x0; e <= ax.x1; ++e) {
    const double x = ax.x(std::exp2(e));
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:.0f}</text>\n",
                       x, kTop, plot_bottom, plot_bottom + 16, std::exp2(e));
  }
  for (double e = ax.y0; e <= ax.y1; ++e) {
    const double y = ax.y(std::pow(10.0, e));
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">1e{5:.0f}</text>\n",
                       kLeft, y, plot_right, kLeft - 6, y + 4, e);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">tokens per call</text>\n",
                     (kLeft + plot_right) / 2, kHeight - 18);
  svg += fmt::format("<text x=\"18\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0:.1f})\">"
                     "tokens/s</text>\n",
                     (kTop + plot_bottom) / 2);

  // Series in first-appearance order, and each shape's roofline (over the token counts measured).
  std::vector<std::string> series, shapes;
  std::map<std::string, std::vector<const Row*>> by_series;
  std::map<std::string, std::map<std::int64_t, const Row*>> by_shape;
  for (const Row* r : rows) {
    if (!by_series.count(r->series)) series.push_back(r->series);
    by_series[r->series].push_back(r);
    const std::string shape_key = r->op + " " + r->shape + " " + r->scheme;
    if (!by_shape.count(shape_key)) shapes.push_back(shape_key);
    by_shape[shape_key].emplace(r->tokens, r);
  }
  double legend_y = kTop + 10;
  for (const std::string& s : shapes) {
    std::string points;
    for (const auto& [t, r] : by_shape[s]) {
      const double rf = roof(report, *r);
      if (rf < 1e299) points += fmt::format("{:.1f},{:.1f} ", ax.x(static_cast<double>(t)), ax.y(rf));
    }
    if (points.empty()) continue;
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"#888\" stroke-width=\"1.5\" "
                       "stroke-dasharray=\"6 4\"><title>roofline: {}</title></polyline>\n",
                       points, xml_escape(s));
  }
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#888\" "
                     "stroke-dasharray=\"6 4\"/><text x=\"{3}\" y=\"{4:.1f}\" font-size=\"11\">roofline: "
                     "min(stream read, FMA peak), per shape</text>\n",
                     plot_right + 12, legend_y, plot_right + 36, plot_right + 42, legend_y + 4);
  legend_y += 20;
  std::size_t color = 0;
  for (const std::string& s : series) {
    const char* c = kColors[color++ % (sizeof(kColors) / sizeof(kColors[0]))];
    std::vector<const Row*> pts = by_series[s];
    std::sort(pts.begin(), pts.end(), [](const Row* a, const Row* b) { return a->tokens < b->tokens; });
    std::string points;
    for (const Row* r : pts) points += fmt::format("{:.1f},{:.1f} ", ax.x(static_cast<double>(r->tokens)), ax.y(r->tokens_per_second()));
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points, c);
    for (const Row* r : pts)
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{} T={}: {:.0f} tokens/s, "
                         "{:.2f} GB/s, {:.1f} GFLOP/s</title></circle>\n",
                         ax.x(static_cast<double>(r->tokens)), ax.y(r->tokens_per_second()), c, xml_escape(s),
                         r->tokens, r->tokens_per_second(), r->gbps(), r->gflops());
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                       "<text x=\"{4}\" y=\"{5:.1f}\" font-size=\"11\">{6}</text>\n",
                       plot_right + 12, legend_y, plot_right + 36, c, plot_right + 42, legend_y + 4, xml_escape(s));
    legend_y += 18;
  }
  svg += "</svg>\n";
  return svg;
}

void write_roofline_svg(const Report& report, const std::string& path) {
  const std::string svg = roofline_svg(report);
  if (svg.empty()) throw Error("--plot " + path + ": no timed rows to draw");
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("--plot " + path + ": cannot open the file for writing");
  out << svg;
  out.close();
  if (!out) throw Error("--plot " + path + ": writing the file failed");
}

}  // namespace fp4cl::bench
