// What a built kernel reports of its limits on a device, for the message of a launch that failed:
// the work-group size the driver reports for it (CL_KERNEL_WORK_GROUP_SIZE), the size its source
// requires, its memory, and the device's maximum work-group.
//
// Not a limit to plan by on NVIDIA's OpenCL: it reports 256 for kernels that require and launch
// work-groups of 288 or 512 (measured on an H200, the mma kernels of bench/gpu/history.md).
#pragma once

#include <string>

#include "fp4cl/opencl.hpp"

namespace fp4cl {

// "the device allows work-groups of at most M work-items; the kernel requires R and reports
// CL_KERNEL_WORK_GROUP_SIZE N, P bytes of private memory a work-item and L of local memory".
// Never throws (a query the driver does not answer reads "unknown").
std::string describe_kernel_limits(const cl::Kernel& kernel, const cl::Device& device);

}  // namespace fp4cl
