// Devices as their drivers describe them, for selections and tuning lookups without the device.
#pragma once

#include <cstdint>

#include "fp4cl/context.hpp"

namespace fp4cl::test {

// An H200 as NVIDIA's OpenCL describes it (driver 580.159.04): the device the shipped
// tuning/nvidia-h200.json was tuned on, whose entries it matches.
inline DeviceInfo described_h200() {
  DeviceInfo gpu;
  gpu.platform_name = "NVIDIA CUDA";
  gpu.vendor = "NVIDIA Corporation";
  gpu.name = "NVIDIA H200";
  gpu.driver_version = "580.159.04";
  gpu.kind = DeviceKind::gpu;
  gpu.compute_units = 132;
  gpu.nv_compute_capability = 90;
  gpu.local_mem_bytes = 48 * 1024;
  gpu.max_work_group_size = 1024;
  gpu.global_mem_bytes = gpu.max_alloc_bytes = std::uint64_t{1} << 36;
  return gpu;
}

}  // namespace fp4cl::test
