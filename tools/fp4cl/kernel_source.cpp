// `fp4cl kernel-source FILE`: prints an embedded kernel file with its `#include "path"` lines
// resolved, as the library hands it to clBuildProgram (fp4cl::kernel_source), for compilers and
// tools outside OpenCL (tools/check-nvptx.sh compiles it for NVIDIA GPUs without one).
#include <fmt/format.h>

#include <string>

#include "commands.hpp"
#include "fp4cl/program_cache.hpp"

namespace fp4cl::cli {

void register_kernel_source(CLI::App& app) {
  auto* cmd = app.add_subcommand("kernel-source",
                                 "Print an embedded kernel file (\"moe_mma.cl\") with its includes resolved");
  static std::string file;
  cmd->add_option("file", file, "a file under kernels/, e.g. moe_mma.cl or common/formats.cl")->required();
  cmd->callback([] { fmt::print("{}", kernel_source(file)); });
}

}  // namespace fp4cl::cli
