// fp4cl-bench: benchmarks of the fp4cl layers against the device's measured peaks, and the tuner
// that writes the tuning database. Each subcommand lives in its own file (bench_commands.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "fp4cl/device.hpp"

int main(int argc, char** argv) {
  fp4cl::prefer_pinned_pocl_threads();  // before any OpenCL call
  CLI::App app{"fp4cl-bench: benchmarks of fp4cl layers, device peaks and kernel tuning"};
  app.require_subcommand(1);
  app.add_option_function<std::string>(
      "--device", [](const std::string& s) { fp4cl::bench::set_device_selector(s); },
      "device selector (as FP4CL_DEVICE: 'cpu', 'gpu', 'P:D' or a name)");
  fp4cl::bench::register_devices(app);
  fp4cl::bench::register_linear(app);
  fp4cl::bench::register_moe(app);
  fp4cl::bench::register_quant(app);
  fp4cl::bench::register_stream(app);
  fp4cl::bench::register_tune(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp4cl-bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
