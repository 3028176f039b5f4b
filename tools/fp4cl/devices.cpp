// `fp4cl devices`: lists the OpenCL devices and which one the default selector picks.
#include <fmt/format.h>

#include "commands.hpp"
#include "fp4cl/device.hpp"

namespace fp4cl::cli {

void register_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the OpenCL devices and the one fp4cl selects");
  cmd->callback([] {
    const auto devices = list_devices();
    fmt::print("OpenCL devices ({}):\n", devices.size());
    for (const auto& d : devices) fmt::print("  {}\n", d.describe());
    const std::string selector = device_selector_from_env();
    const auto selected = select_device(selector);
    fmt::print("selected (FP4CL_DEVICE=\"{}\"): {}\n", selector, selected.info.describe());
  });
}

}  // namespace fp4cl::cli
