// fp4cl-bench devices: every OpenCL device with the identity the tuning database keys on (and, for
// CPU devices, how slow this processor multiplies fp32 denormals and whether the kernels take
// AVX-512 BF16 dot products there), and with --measure the peaks of the selected device
// (streaming read, fp32 FMA).
//
//   fp4cl-bench devices [--measure]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "device_peaks.hpp"
#include "fp4cl/device.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "kernels/cpu_bf16_dot.hpp"
#include "kernels/cpu_denormal_speed.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl::bench {

namespace {

struct DevicesArgs {
  bool measure = false;
};

// Whether the MoE and linear kernels may take AVX-512 BF16 dot products on CPU device d
// (kernels/cpu_bf16_dot.hpp): the processor's features, then the probe built by d's compiler.
std::string bf16_dot_verdict(const DeviceInfo& d) {
  if (!cpu_has_avx512_bf16()) return "not used (this processor lacks AVX-512 BW, VBMI or BF16)";
  try {
    const std::string why = cpu_bf16_dot_unavailable(Context::create(fmt::format("{}:{}", d.platform_index, d.device_index)));
    if (why.empty()) return "used (its OpenCL compiler builds them; FP4CL_MOE_BF16_DOT=0, FP4CL_LINEAR_BF16_DOT=0 turn them off)";
    // The compiler's first error line, not its whole build log.
    const std::size_t at = why.find("error:");
    return "not used: " + (at == std::string::npos ? why.substr(0, why.find('\n'))
                                                    : "its OpenCL compiler refuses them (" +
                                                          why.substr(at, why.find('\n', at) - at) + ")");
  } catch (const Error& e) {
    return fmt::format("unknown ({})", e.what());
  }
}

void run_devices(const DevicesArgs& a) {
  for (const DeviceInfo& d : list_devices()) {
    fmt::print("{}:{}  {}\n", d.platform_index, d.device_index, d.name);
    fmt::print("      platform {} ({}), vendor {}, driver {}\n", d.platform_name, d.platform_version, d.vendor,
               d.driver_version);
    fmt::print("      {}, {} compute units, {} MiB, largest allocation {} MiB, local memory {} KiB, {}, "
               "float vectors of {}\n",
               to_string(d.kind), d.compute_units, d.global_mem_bytes >> 20, d.max_alloc_bytes >> 20,
               d.local_mem_bytes >> 10, d.opencl_c_version, d.preferred_float_width);
    if (d.kind == DeviceKind::cpu && d.fp32_denormals) {
      // What decides the MoE E2M1 decode (kernels/cpu_denormal_speed.hpp).
      fmt::print("      fp32 denormals kept; multiplies with them {:.1f}x the time of normal ones on this processor: "
                 "by default the MoE kernels decode E2M1 {}\n",
                 host_denormal_speed().ratio(), cpu_fp32_denormals_slow(d) ? "to exact values" : "to fp32 subnormals");
    }
    if (d.kind == DeviceKind::cpu) fmt::print("      AVX-512 BF16 dot products: {}\n", bf16_dot_verdict(d));
  }
  const auto store = tuning::tuning_store();
  std::string loaded;
  for (const std::string& l : store->loaded()) loaded += (loaded.empty() ? "" : ", ") + l;
  fmt::print("tuning databases: {}\n", loaded.empty() ? "none (built-in defaults)" : loaded);
  for (const std::string& s : store->skipped()) fmt::print("  skipped: {}\n", s);
  for (const tuning::DeviceTuning& d : store->database().devices)
    fmt::print("  {} entries for {}\n", d.entries.size(), d.device.describe());
  if (a.measure) {
    Context ctx = bench_context();
    fmt::print("measuring {}\n", ctx.info().describe());
    fmt::print("  {}\n  last-level cache: {} MiB\n", measure_peaks(ctx).describe(), last_level_cache_bytes(ctx) >> 20);
  }
}

}  // namespace

void register_devices(CLI::App& app) {
  auto a = std::make_shared<DevicesArgs>();
  CLI::App* d = app.add_subcommand("devices", "list the OpenCL devices and the tuning databases loaded");
  d->add_flag("--measure", a->measure, "also measure the selected device's streaming read and fp32 FMA peak");
  d->callback([a] { run_devices(*a); });
}

}  // namespace fp4cl::bench
