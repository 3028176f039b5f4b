// Contexts for the shards of an expert-parallel layer, all on the test device: OpenCL
// sub-devices of it (clCreateSubDevices, CL_DEVICE_PARTITION_EQUALLY), or separate contexts.
#pragma once

#include <string>
#include <vector>

#include "fp4cl/context.hpp"

namespace fp4cl::test {

enum class ShardDevices { sub_devices, separate_contexts };
std::string to_string(ShardDevices kind);

// `n` contexts, created once per process and kind. sub_devices: one per sub-device of an equal
// partition of the test device; empty when the device cannot be split into n (the reason in
// `why_not`). separate_contexts: n contexts of their own (own cl_context, queue and program
// cache) on the test device.
const std::vector<Context>& shard_contexts(ShardDevices kind, int n, std::string* why_not = nullptr);

}  // namespace fp4cl::test
