#include "cl/device_selector.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "support/check.hpp"
#include "support/text.hpp"

namespace fp4cl::detail {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool has_letter(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](unsigned char c) { return std::isalpha(c) != 0; });
}

std::string device_list(const std::vector<DeviceInfo>& devices) {
  if (devices.empty()) return "\n  (none: no OpenCL platform reports a device; is an ICD such as pocl-opencl-icd installed?)";
  std::string s;
  for (const auto& d : devices) s += "\n  " + d.describe();
  return s;
}

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

std::size_t first_where(const std::vector<DeviceInfo>& devices, bool (*pred)(const DeviceInfo&)) {
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (pred(devices[i])) return i;
  return kNone;
}

// "P:D" with two non-negative decimal indices, or nullopt when `s` is not of that form.
std::optional<std::pair<int, int>> parse_indices(std::string_view s) {
  const std::size_t colon = s.find(':');
  const std::string_view p = s.substr(0, colon), d = s.substr(colon + 1);
  if (!all_digits(p) || !all_digits(d) || p.size() > 6 || d.size() > 6) return std::nullopt;
  return std::make_pair(std::stoi(std::string(p)), std::stoi(std::string(d)));
}

}  // namespace

std::size_t select_device_index(std::string_view selector_in, const std::vector<DeviceInfo>& devices) {
  const std::string selector = to_lower(trim(selector_in));
  std::size_t found = kNone;
  if (selector.empty() || selector == "default") {
    // The first GPU; else the PoCL CPU device (what CI runs); else any CPU; else the first device.
    found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::gpu; });
    if (found == kNone)
      found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::cpu && d.is_pocl(); });
    if (found == kNone) found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::cpu; });
    if (found == kNone && !devices.empty()) found = 0;
  } else if (selector == "gpu") {
    found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::gpu; });
  } else if (selector == "cpu") {
    found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::cpu; });
  } else if (selector == "accelerator") {
    found = first_where(devices, [](const DeviceInfo& d) { return d.kind == DeviceKind::accelerator; });
  } else if (const std::size_t colon = selector.find(':');
             colon != std::string::npos && !has_letter(selector.substr(0, colon))) {
    // Index form. (Device names may contain ':' too, e.g. AMD's "gfx90a:sramecc+:xnack-", but
    // never right after a letterless prefix.)
    const auto indices = parse_indices(selector);
    if (!indices) {
      fail("malformed OpenCL device selector '{}': expected P:D, a platform index and a device index "
           "as `fp4cl devices` prints them (e.g. 0:1); the devices are:{}",
           std::string(selector_in), device_list(devices));
    }
    for (std::size_t i = 0; i < devices.size() && found == kNone; ++i) {
      if (devices[i].platform_index == indices->first && devices[i].device_index == indices->second) found = i;
    }
  } else {
    // A name substring: first against the device names, then against "platform name device name".
    for (std::size_t i = 0; i < devices.size() && found == kNone; ++i) {
      if (to_lower(devices[i].name).find(selector) != std::string::npos) found = i;
    }
    for (std::size_t i = 0; i < devices.size() && found == kNone; ++i) {
      if (to_lower(devices[i].platform_name + " " + devices[i].name).find(selector) != std::string::npos) found = i;
    }
  }
  if (found == kNone) {
    fail("no OpenCL device matches the selector '{}' (FP4CL_DEVICE takes \"gpu\", \"cpu\", \"accelerator\", "
         "\"P:D\" or a device name substring; empty or \"default\" = the first GPU, else the PoCL CPU device); "
         "the devices are:{}",
         std::string(selector_in), device_list(devices));
  }
  return found;
}

}  // namespace fp4cl::detail
