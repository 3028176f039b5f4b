// fp4cl: the command-line tool. Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>

#include "commands.hpp"
#include "fp4cl/device.hpp"
#include "fp4cl/error.hpp"

int main(int argc, char** argv) {
  fp4cl::prefer_pinned_pocl_threads();  // before any OpenCL call
  CLI::App app{"fp4cl: FP4 (NVFP4, MXFP4) MoE and linear layers on OpenCL"};
  app.require_subcommand(1);
  fp4cl::cli::register_devices(app);
  fp4cl::cli::register_demo(app);
  fp4cl::cli::register_make_model(app);
  fp4cl::cli::register_quantize(app);
  fp4cl::cli::register_inspect(app);
  fp4cl::cli::register_run(app);
  fp4cl::cli::register_kernel_source(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp4cl: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
