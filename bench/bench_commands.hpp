// The subcommands of fp4cl-bench; each register_* adds one with its callback.
#pragma once

#include <CLI/CLI.hpp>

namespace fp4cl::bench {

void register_linear(CLI::App& app);  // linear_bench.cpp
void register_stream(CLI::App& app);  // stream_bench.cpp

}  // namespace fp4cl::bench
