// The FP4CL_DEVICE selector grammar: exercised against made-up device lists (so that GPU,
// several platforms and odd names can be covered on a one-device CI machine), then against the
// devices of this machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cl/device_selector.hpp"
#include "fp4cl/device.hpp"
#include "fp4cl/error.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl {
namespace {

using detail::select_device_index;

DeviceInfo device(int platform, int index, DeviceKind kind, std::string platform_name, std::string name) {
  DeviceInfo d;
  d.platform_index = platform;
  d.device_index = index;
  d.kind = kind;
  d.platform_name = std::move(platform_name);
  d.name = std::move(name);
  return d;
}

const char* kPocl = "Portable Computing Language";

// 0:0 an Intel CPU runtime, 1:0 PoCL's CPU, 2:0 and 2:1 two NVIDIA GPUs, 3:0 an AMD GPU.
std::vector<DeviceInfo> machine() {
  return {device(0, 0, DeviceKind::cpu, "Intel(R) OpenCL", "Intel(R) Xeon(R) Platinum 8480+"),
          device(1, 0, DeviceKind::cpu, kPocl, "pthread-haswell-AMD EPYC 7B13"),
          device(2, 0, DeviceKind::gpu, "NVIDIA CUDA", "NVIDIA H200"),
          device(2, 1, DeviceKind::gpu, "NVIDIA CUDA", "NVIDIA H100 80GB HBM3"),
          device(3, 0, DeviceKind::gpu, "AMD Accelerated Parallel Processing", "gfx90a:sramecc+:xnack-")};
}

std::string error_of(std::string_view selector, const std::vector<DeviceInfo>& devices) {
  try {
    const std::size_t i = select_device_index(selector, devices);
    return "no error: selected " + devices[i].describe();
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(DeviceSelector, DefaultIsTheFirstGpu) {
  const auto devices = machine();
  EXPECT_EQ(select_device_index("", devices), 2u);
  EXPECT_EQ(select_device_index("default", devices), 2u);
  EXPECT_EQ(select_device_index("  Default ", devices), 2u);
}

TEST(DeviceSelector, DefaultWithoutGpuIsThePoclCpuEvenWhenAnotherCpuComesFirst) {
  const std::vector<DeviceInfo> devices = {machine()[0], machine()[1]};
  EXPECT_EQ(select_device_index("", devices), 1u);
}

TEST(DeviceSelector, DefaultWithoutGpuOrPoclIsTheFirstCpuElseTheFirstDevice) {
  const DeviceInfo accelerator = device(0, 0, DeviceKind::accelerator, "FPGA SDK", "fpga0");
  const DeviceInfo other_cpu = device(1, 0, DeviceKind::cpu, "Intel(R) OpenCL", "Xeon");
  EXPECT_EQ(select_device_index("", {accelerator, other_cpu}), 1u);
  EXPECT_EQ(select_device_index("", {accelerator}), 0u);
}

TEST(DeviceSelector, KindsPickTheFirstDeviceOfThatKind) {
  const auto devices = machine();
  EXPECT_EQ(select_device_index("cpu", devices), 0u);
  EXPECT_EQ(select_device_index("gpu", devices), 2u);
  EXPECT_EQ(select_device_index("GPU", devices), 2u);
  const std::string message = error_of("accelerator", devices);
  EXPECT_NE(message.find("no OpenCL device matches the selector 'accelerator'"), std::string::npos) << message;
}

TEST(DeviceSelector, PlatformColonDeviceUsesTheOpenCLIndices) {
  auto devices = machine();
  EXPECT_EQ(select_device_index("2:1", devices), 3u);
  EXPECT_EQ(select_device_index("1:0", devices), 1u);
  EXPECT_EQ(select_device_index(" 3:0 ", devices), 4u);
  // Indices are the OpenCL ones, not positions in the list (a skipped platform leaves a gap).
  devices.erase(devices.begin());
  EXPECT_EQ(select_device_index("2:0", devices), 1u);
  const std::string message = error_of("0:0", devices);
  EXPECT_NE(message.find("no OpenCL device matches the selector '0:0'"), std::string::npos) << message;
}

TEST(DeviceSelector, NameSubstringIsCaseInsensitive) {
  const auto devices = machine();
  EXPECT_EQ(select_device_index("h100", devices), 3u);
  EXPECT_EQ(select_device_index("NVIDIA", devices), 2u);
  EXPECT_EQ(select_device_index("epyc", devices), 1u);
  EXPECT_EQ(select_device_index("Xeon(r) PLATINUM", devices), 0u);
}

TEST(DeviceSelector, NameSubstringFallsBackToPlatformAndDeviceName) {
  const auto devices = machine();
  EXPECT_EQ(select_device_index("cuda", devices), 2u);
  EXPECT_EQ(select_device_index("portable computing language pthread", devices), 1u);
}

TEST(DeviceSelector, NamesWithColonsAreNamesNotIndices) {
  const auto devices = machine();
  EXPECT_EQ(select_device_index("gfx90a:sramecc", devices), 4u);
  EXPECT_EQ(select_device_index("sramecc+:xnack-", devices), 4u);
}

TEST(DeviceSelector, NoMatchNamesTheSelectorAndListsEveryDevice) {
  const auto devices = machine();
  const std::string message = error_of("Radeon 7900", devices);
  EXPECT_NE(message.find("no OpenCL device matches the selector 'Radeon 7900'"), std::string::npos) << message;
  for (const auto& d : devices) EXPECT_NE(message.find(d.describe()), std::string::npos) << d.describe();
}

TEST(DeviceSelector, NoDevicesAtAllSaysSo) {
  const std::string message = error_of("", {});
  EXPECT_NE(message.find("no OpenCL device matches the selector ''"), std::string::npos) << message;
  EXPECT_NE(message.find("no OpenCL platform reports a device"), std::string::npos) << message;
}

TEST(DeviceSelector, MalformedPlatformColonDeviceIsAnError) {
  const auto devices = machine();
  for (const char* selector : {"0:", ":1", "-1:0", "0:-1", "0:x", "0:1:2", "0 : 1", "1.0:0", "+1:0"}) {
    const std::string message = error_of(selector, devices);
    EXPECT_NE(message.find(std::string("malformed OpenCL device selector '") + selector + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("expected P:D"), std::string::npos) << message;
    EXPECT_NE(message.find(devices[2].describe()), std::string::npos) << message;
  }
}

// On this machine's devices (PoCL on CI).

TEST(SelectDevice, DefaultSelectsADeviceWithItsIndices) {
  const auto devices = list_devices();
  ASSERT_FALSE(devices.empty()) << "no OpenCL device on this machine";
  const SelectedDevice selected = select_device("");
  EXPECT_GE(selected.info.platform_index, 0);
  EXPECT_GE(selected.info.device_index, 0);
  EXPECT_EQ(selected.device.getInfo<CL_DEVICE_NAME>().c_str(), selected.info.name);
}

TEST(SelectDevice, IndicesAndNameSelectTheSameDevice) {
  const auto devices = list_devices();
  ASSERT_FALSE(devices.empty());
  for (const DeviceInfo& d : devices) {
    const std::string indices = std::to_string(d.platform_index) + ":" + std::to_string(d.device_index);
    const SelectedDevice by_index = select_device(indices);
    EXPECT_EQ(by_index.info.name, d.name);
    EXPECT_EQ(by_index.info.platform_name, d.platform_name);
    std::string upper = d.name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    // The full name matches this device unless an earlier device's name contains it.
    const SelectedDevice by_name = select_device(upper);
    EXPECT_NE(by_name.info.name.find(d.name), std::string::npos);
  }
}

TEST(SelectDevice, CpuSelectsACpuDevice) {
  const auto devices = list_devices();
  bool has_cpu = false;
  for (const auto& d : devices) has_cpu = has_cpu || d.kind == DeviceKind::cpu;
  if (!has_cpu) GTEST_SKIP() << "this machine has no OpenCL CPU device";
  EXPECT_EQ(select_device("cpu").info.kind, DeviceKind::cpu);
  EXPECT_EQ(select_device("CPU").info.kind, DeviceKind::cpu);
}

TEST(SelectDevice, NoMatchListsThisMachinesDevices) {
  try {
    select_device("no-such-opencl-device-xyz");
    FAIL() << "select_device did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'no-such-opencl-device-xyz'"), std::string::npos) << message;
    for (const auto& d : list_devices()) EXPECT_NE(message.find(d.describe()), std::string::npos) << message;
  }
}

TEST(SelectDevice, SelectorFromEnvironment) {
  {
    test::ScopedEnv env("FP4CL_DEVICE", std::nullopt);
    EXPECT_EQ(device_selector_from_env(), "");
  }
  test::ScopedEnv env("FP4CL_DEVICE", "0:0");
  EXPECT_EQ(device_selector_from_env(), "0:0");
}

// POCL_AFFINITY=1 where the environment does not say; a value already there is kept.
TEST(SelectDevice, PinnedPoclThreadsUnlessTheEnvironmentSays) {
  {
    test::ScopedEnv env("POCL_AFFINITY", std::nullopt);
    EXPECT_TRUE(prefer_pinned_pocl_threads());
    ASSERT_NE(std::getenv("POCL_AFFINITY"), nullptr);
    EXPECT_EQ(std::string(std::getenv("POCL_AFFINITY")), "1");
  }
  test::ScopedEnv env("POCL_AFFINITY", "0");
  EXPECT_FALSE(prefer_pinned_pocl_threads());
  EXPECT_EQ(std::string(std::getenv("POCL_AFFINITY")), "0");
}

}  // namespace
}  // namespace fp4cl
