#include "cl/kernel_limits.hpp"

#include <fmt/format.h>

namespace fp4cl {

namespace {

template <cl_kernel_work_group_info Name, typename T>
std::string kernel_info(const cl::Kernel& kernel, const cl::Device& device) {
  T value{};
  if (kernel.getWorkGroupInfo(device, Name, &value) != CL_SUCCESS) return "unknown";
  return fmt::format("{}", value);
}

}  // namespace

std::string describe_kernel_limits(const cl::Kernel& kernel, const cl::Device& device) {
  std::size_t device_max = 0;
  const std::string device_limit = device.getInfo(CL_DEVICE_MAX_WORK_GROUP_SIZE, &device_max) == CL_SUCCESS
                                       ? std::to_string(device_max)
                                       : std::string("unknown");
  cl::detail::size_t_array required{};
  std::string required_size = "unknown";
  if (kernel.getWorkGroupInfo(device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, &required) == CL_SUCCESS)
    required_size = required[0] == 0 ? std::string("no work-group size")
                                     : fmt::format("work-groups of {} × {} × {}", required[0], required[1], required[2]);
  return fmt::format(
      "the device allows work-groups of at most {} work-items; the kernel requires {} and reports "
      "CL_KERNEL_WORK_GROUP_SIZE {}, {} bytes of private memory a work-item and {} bytes of local memory",
      device_limit, required_size, kernel_info<CL_KERNEL_WORK_GROUP_SIZE, std::size_t>(kernel, device),
      kernel_info<CL_KERNEL_PRIVATE_MEM_SIZE, cl_ulong>(kernel, device),
      kernel_info<CL_KERNEL_LOCAL_MEM_SIZE, cl_ulong>(kernel, device));
}

}  // namespace fp4cl
