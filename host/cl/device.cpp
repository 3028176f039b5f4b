#include "fp4cl/device.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "cl/device_selector.hpp"
#include "support/check.hpp"
#include "support/log.hpp"
#include "support/text.hpp"

namespace fp4cl {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

template <cl_int Name, typename Object>
auto info_of(const Object& object, const char* what) {
  cl_int err = CL_SUCCESS;
  auto value = object.template getInfo<Name>(&err);
  check_cl(err, "querying {}", what);
  return value;
}

struct Enumerated {
  cl::Device device;
  DeviceInfo info;
};

// Every device of every platform. A platform or device that cannot be queried is skipped with a
// warning (one broken ICD must not hide the others); indices stay those of the OpenCL lists.
std::vector<Enumerated> enumerate() {
  std::vector<cl::Platform> platforms;
  const cl_int err = cl::Platform::get(&platforms);
  // The ICD loader reports "no platforms" as CL_PLATFORM_NOT_FOUND_KHR (-1001).
  if (err == -1001 || (err == CL_SUCCESS && platforms.empty())) return {};
  check_cl(err, "listing OpenCL platforms");
  std::vector<Enumerated> all;
  for (std::size_t p = 0; p < platforms.size(); ++p) {
    std::vector<cl::Device> devices;
    const cl_int derr = platforms[p].getDevices(CL_DEVICE_TYPE_ALL, &devices);
    if (derr == CL_DEVICE_NOT_FOUND) continue;
    if (derr != CL_SUCCESS) {
      log::warn("skipping OpenCL platform {}: listing its devices failed with {} ({})", p, cl_status_name(derr), derr);
      continue;
    }
    for (std::size_t d = 0; d < devices.size(); ++d) {
      try {
        all.push_back({devices[d], query_device_info(devices[d], static_cast<int>(p), static_cast<int>(d))});
      } catch (const Error& e) {
        log::warn("skipping OpenCL device {}:{}: {}", p, d, e.what());
      }
    }
  }
  return all;
}

}  // namespace

const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "CPU";
    case DeviceKind::gpu: return "GPU";
    case DeviceKind::accelerator: return "accelerator";
    default: return "other";
  }
}

bool DeviceInfo::has_extension(std::string_view ext) const {
  std::size_t pos = 0;
  while ((pos = extensions.find(ext, pos)) != std::string::npos) {
    const bool start_ok = pos == 0 || extensions[pos - 1] == ' ';
    const std::size_t end = pos + ext.size();
    const bool end_ok = end == extensions.size() || extensions[end] == ' ';
    if (start_ok && end_ok) return true;
    pos = end;
  }
  return false;
}

bool DeviceInfo::is_pocl() const {
  const std::string platform = to_lower(platform_name);
  return platform.find("portable computing language") != std::string::npos ||
         platform.find("pocl") != std::string::npos;
}

std::string DeviceInfo::describe() const {
  return fmt::format("{}:{} {} ({}, {}, {}, {} CUs, {} MiB)", platform_index, device_index, name, platform_name,
                     to_string(kind), opencl_c_version, compute_units, global_mem_bytes >> 20);
}

DeviceInfo query_device_info(const cl::Device& device, int platform_index, int device_index) {
  DeviceInfo info;
  info.platform_index = platform_index;
  info.device_index = device_index;
  const cl::Platform platform(info_of<CL_DEVICE_PLATFORM>(device, "the device's platform"));
  info.platform_name = trim(info_of<CL_PLATFORM_NAME>(platform, "the platform name"));
  info.platform_version = trim(info_of<CL_PLATFORM_VERSION>(platform, "the platform version"));
  info.vendor = trim(info_of<CL_DEVICE_VENDOR>(device, "the device vendor"));
  info.name = trim(info_of<CL_DEVICE_NAME>(device, "the device name"));
  info.driver_version = trim(info_of<CL_DRIVER_VERSION>(device, "the driver version"));
  info.device_version = trim(info_of<CL_DEVICE_VERSION>(device, "the device version"));
  info.opencl_c_version = trim(info_of<CL_DEVICE_OPENCL_C_VERSION>(device, "the OpenCL C version"));
  info.extensions = trim(info_of<CL_DEVICE_EXTENSIONS>(device, "the device extensions"));
  const cl_device_type type = info_of<CL_DEVICE_TYPE>(device, "the device type");
  info.kind = (type & CL_DEVICE_TYPE_GPU)           ? DeviceKind::gpu
              : (type & CL_DEVICE_TYPE_CPU)         ? DeviceKind::cpu
              : (type & CL_DEVICE_TYPE_ACCELERATOR) ? DeviceKind::accelerator
                                                    : DeviceKind::other;
  info.compute_units = info_of<CL_DEVICE_MAX_COMPUTE_UNITS>(device, "the compute units");
  info.preferred_float_width =
      info_of<CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT>(device, "the preferred fp32 vector width");
  info.global_mem_bytes = info_of<CL_DEVICE_GLOBAL_MEM_SIZE>(device, "the global memory size");
  info.max_alloc_bytes = info_of<CL_DEVICE_MAX_MEM_ALLOC_SIZE>(device, "the maximum allocation");
  info.local_mem_bytes = info_of<CL_DEVICE_LOCAL_MEM_SIZE>(device, "the local memory size");
  info.max_work_group_size = info_of<CL_DEVICE_MAX_WORK_GROUP_SIZE>(device, "the maximum work-group size");
  cl_device_fp_config fp64 = 0;
  if (device.getInfo(CL_DEVICE_DOUBLE_FP_CONFIG, &fp64) != CL_SUCCESS) fp64 = 0;
  info.has_fp64 = fp64 != 0 || info.has_extension("cl_khr_fp64");
  const cl_device_fp_config fp32 = info_of<CL_DEVICE_SINGLE_FP_CONFIG>(device, "the fp32 capabilities");
  info.correctly_rounded_divide = (fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  info.fp32_denormals = (fp32 & CL_FP_DENORM) != 0;
  if (info.has_extension("cl_nv_device_attribute_query")) {
    // CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / _MINOR_NV (cl_ext.h of the extension).
    constexpr cl_device_info kMajor = 0x4000, kMinor = 0x4001;
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(device(), kMajor, sizeof major, &major, nullptr) == CL_SUCCESS &&
        clGetDeviceInfo(device(), kMinor, sizeof minor, &minor, nullptr) == CL_SUCCESS)
      info.nv_compute_capability = static_cast<int>(10 * major + minor);
  }
  return info;
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> infos;
  for (auto& e : enumerate()) infos.push_back(std::move(e.info));
  return infos;
}

std::string device_selector_from_env() {
  const char* v = std::getenv("FP4CL_DEVICE");
  return v ? std::string(v) : std::string();
}

SelectedDevice select_device(std::string_view selector) {
  const auto all = enumerate();
  std::vector<DeviceInfo> infos;
  infos.reserve(all.size());
  for (const auto& e : all) infos.push_back(e.info);
  const std::size_t i = detail::select_device_index(selector, infos);
  return {all[i].device, all[i].info};
}

bool prefer_pinned_pocl_threads() {
  if (std::getenv("POCL_AFFINITY") != nullptr) return false;
  return ::setenv("POCL_AFFINITY", "1", 0) == 0;
}

}  // namespace fp4cl
