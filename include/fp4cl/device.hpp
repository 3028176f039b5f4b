// OpenCL device discovery and selection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/opencl.hpp"

namespace fp4cl {

enum class DeviceKind { cpu, gpu, accelerator, other };
const char* to_string(DeviceKind kind);

// What fp4cl knows about a device: its identity (for caches and tuning databases) and the
// capabilities kernels are chosen by.
struct DeviceInfo {
  int platform_index = -1;  // position in clGetPlatformIDs, -1 for a device the caller brought
  int device_index = -1;    // position within its platform
  std::string platform_name, platform_version, vendor, name, driver_version, device_version,
      opencl_c_version, extensions;
  DeviceKind kind = DeviceKind::other;
  unsigned compute_units = 0;
  // CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT: on PoCL's CPU device the SIMD width in floats (16 with
  // AVX-512, 8 with AVX2), which decides which CPU kernels are fast.
  unsigned preferred_float_width = 1;
  std::uint64_t global_mem_bytes = 0, max_alloc_bytes = 0, local_mem_bytes = 0;
  std::size_t max_work_group_size = 0;
  bool has_fp64 = false;                 // cl_khr_fp64 (or fp64 in the core of the device)
  bool correctly_rounded_divide = false; // CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT for fp32
  bool fp32_denormals = false;           // CL_FP_DENORM for fp32 (the device does not flush them)
  // NVIDIA devices (cl_nv_device_attribute_query): compute capability as 10·major + minor (90
  // for an H100); 0 elsewhere. Tensor-core kernels (inline PTX mma.sync) need 80 or more.
  int nv_compute_capability = 0;

  bool has_extension(std::string_view ext) const;
  // Whether the device is PoCL's (its platform name says "Portable Computing Language" or "pocl").
  bool is_pocl() const;
  // "0:0 pthread-haswell-AMD EPYC (Portable Computing Language, CPU, OpenCL C 1.2 PoCL)"
  std::string describe() const;
};

DeviceInfo query_device_info(const cl::Device& device, int platform_index = -1, int device_index = -1);

// Every device of every platform, in platform order.
std::vector<DeviceInfo> list_devices();

// Selects a device. Selector grammar (case-insensitive, surrounding white space ignored):
//   "" or "default"          the first GPU; else the first CPU of the PoCL platform (what CI
//                            runs); else the first CPU; else the first device
//   "gpu" | "cpu" | "accelerator"   the first device of that kind
//   "P:D"                    device D of platform P (indices as list_devices() and
//                            `fp4cl devices` print them); a selector whose part before the first
//                            ':' has no letter must have this form ("0:", "-1:0", "0:x" are errors)
//   anything else            the first device whose name contains it, else the first whose
//                            "platform name + ' ' + device name" contains it (names may hold ':',
//                            e.g. "gfx90a:sramecc+:xnack-")
// Throws fp4cl::Error naming the selector and listing every device when nothing matches.
struct SelectedDevice {
  cl::Device device;
  DeviceInfo info;
};
SelectedDevice select_device(std::string_view selector);

// The selector from the environment variable FP4CL_DEVICE, or "" when it is unset.
std::string device_selector_from_env();

// Asks PoCL (OpenCL on CPUs) to pin its worker threads, one per core (POCL_AFFINITY=1), unless
// the environment already sets POCL_AFFINITY. It only takes effect before the process's first
// OpenCL call (PoCL reads it when its devices start). fp4cl's own tools (fp4cl, fp4cl-bench,
// fp4cl-soak) call it first thing; an application embedding fp4cl on PoCL may too. Measured on the
// 2-core CI machine (README "Performance"): linear decode 4096×4096 ~600 → ~350-470 µs, MoE decode
// 15-25 % faster (unpinned, PoCL's two threads often ran as if one did the work). Returns whether
// it set the variable.
bool prefer_pinned_pocl_threads();

}  // namespace fp4cl
