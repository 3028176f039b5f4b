// The subcommands of fp4cl-bench; each register_* adds one with its callback (one file each).
#pragma once

#include <CLI/CLI.hpp>

namespace fp4cl::bench {

void register_devices(CLI::App& app);  // devices_command.cpp
void register_linear(CLI::App& app);   // linear_bench.cpp
void register_moe(CLI::App& app);      // moe_bench.cpp
void register_quant(CLI::App& app);    // quant_bench.cpp
void register_stream(CLI::App& app);   // stream_bench.cpp
void register_tune(CLI::App& app);     // tune_command.cpp

}  // namespace fp4cl::bench
