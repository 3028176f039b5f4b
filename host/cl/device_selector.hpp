// The FP4CL_DEVICE selector grammar, as a pure function over a device list so that it can be
// tested against any set of platforms and devices (fp4cl::select_device applies it to the
// devices of this machine).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "fp4cl/device.hpp"

namespace fp4cl::detail {

// The position in `devices` of the device that `selector` picks (grammar: select_device in
// fp4cl/device.hpp). Throws fp4cl::Error naming the selector and listing every device when
// nothing matches, and explaining the expected form when a "P:D" selector is malformed.
std::size_t select_device_index(std::string_view selector, const std::vector<DeviceInfo>& devices);

}  // namespace fp4cl::detail
