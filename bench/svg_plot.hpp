// A standalone SVG chart of a report: throughput (tokens/s, log scale) against tokens per call
// (log scale), one line per series (shape, scheme, kernel), with each shape's roofline from the
// device peaks measured in the same run: min(streaming read / weight bytes per token, FMA peak /
// flops per token), the bandwidth part dashed.
#pragma once

#include <string>

#include "report.hpp"

namespace fp4cl::bench {

// The SVG document ("" when no row has a positive time).
std::string roofline_svg(const Report& report);

// Writes roofline_svg(report) to `path`; throws fp4cl::Error naming the path on failure.
void write_roofline_svg(const Report& report, const std::string& path);

}  // namespace fp4cl::bench
