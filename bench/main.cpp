// fp4cl-bench: benchmarks of fp4cl layers. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>

#include "bench_commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fp4cl-bench: benchmarks of fp4cl layers"};
  app.require_subcommand(1);
  fp4cl::bench::register_linear(app);
  fp4cl::bench::register_stream(app);
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
