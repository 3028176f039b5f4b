// The subcommands of the fp4cl tool; each register_* adds one and its callback.
#pragma once

#include <CLI/CLI.hpp>

namespace fp4cl::cli {

void register_devices(CLI::App& app);
void register_demo(CLI::App& app);
void register_make_model(CLI::App& app);
void register_quantize(CLI::App& app);
void register_inspect(CLI::App& app);
void register_run(CLI::App& app);
void register_kernel_source(CLI::App& app);

}  // namespace fp4cl::cli
