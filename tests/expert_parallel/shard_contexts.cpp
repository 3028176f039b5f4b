#include "shard_contexts.hpp"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "moe/moe_test_support.hpp"

namespace fp4cl::test {

std::string to_string(ShardDevices kind) {
  return kind == ShardDevices::sub_devices ? "SubDevices" : "SeparateContexts";
}

namespace {

std::vector<Context> make_sub_device_contexts(int n, std::string& why_not) {
  cl::Device parent = test_context().device();  // createSubDevices is not const
  std::vector<cl_device_partition_property> supported;
  if (parent.getInfo(CL_DEVICE_PARTITION_PROPERTIES, &supported) != CL_SUCCESS) supported.clear();
  bool equally = false;
  for (auto p : supported) equally = equally || p == CL_DEVICE_PARTITION_EQUALLY;
  const unsigned units = test_context().info().compute_units;
  if (!equally) {
    why_not = fmt::format("{} does not support CL_DEVICE_PARTITION_EQUALLY", test_context().info().name);
    return {};
  }
  if (units < static_cast<unsigned>(n)) {
    why_not = fmt::format("{} has {} compute units, fewer than {} sub-devices", test_context().info().name, units, n);
    return {};
  }
  const cl_device_partition_property props[] = {
      CL_DEVICE_PARTITION_EQUALLY, static_cast<cl_device_partition_property>(units / static_cast<unsigned>(n)), 0};
  std::vector<cl::Device> subs;
  const cl_int err = parent.createSubDevices(props, &subs);
  if (err != CL_SUCCESS || subs.size() < static_cast<std::size_t>(n)) {
    why_not =
        fmt::format("clCreateSubDevices on {} gave {} devices ({})", test_context().info().name, subs.size(), err);
    return {};
  }
  std::vector<Context> contexts;
  for (int i = 0; i < n; ++i) {
    cl_int e = CL_SUCCESS;
    cl::Context context(subs[static_cast<std::size_t>(i)], nullptr, nullptr, nullptr, &e);
    if (e != CL_SUCCESS) {
      why_not = fmt::format("creating a context on sub-device {} failed ({})", i, e);
      return {};
    }
    cl::CommandQueue queue(context, subs[static_cast<std::size_t>(i)], CL_QUEUE_PROFILING_ENABLE, &e);
    if (e != CL_SUCCESS) {
      why_not = fmt::format("creating a queue on sub-device {} failed ({})", i, e);
      return {};
    }
    contexts.push_back(Context::wrap(context(), queue()));  // retains both
  }
  return contexts;
}

}  // namespace

const std::vector<Context>& shard_contexts(ShardDevices kind, int n, std::string* why_not) {
  static std::map<std::pair<ShardDevices, int>, std::pair<std::vector<Context>, std::string>> made;
  auto it = made.find({kind, n});
  if (it == made.end()) {
    std::vector<Context> contexts;
    std::string reason;
    if (kind == ShardDevices::sub_devices) {
      contexts = make_sub_device_contexts(n, reason);
    } else {
      for (int i = 0; i < n; ++i) contexts.push_back(Context::create());
    }
    it = made.emplace(std::make_pair(kind, n), std::make_pair(std::move(contexts), std::move(reason))).first;
  }
  if (why_not) *why_not = it->second.second;
  return it->second.first;
}

}  // namespace fp4cl::test
