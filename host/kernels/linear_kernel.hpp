// The interface of an FP4 linear kernel strategy, and what a layer tells it. A strategy owns its
// OpenCL kernels and its view of the prepared weights; the layer owns the workspace and the
// buffers of a call. See registry.hpp for how strategies are chosen.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"
#include "kernels/registry.hpp"
#include "prepare/weight_layouts.hpp"

namespace fp4cl {

// What a linear layer needs from a kernel (its arguments were validated by the layer).
struct LinearConfig {
  QuantScheme scheme;
  std::int64_t n = 0, k = 0;
  std::int64_t max_tokens = 1;
  bool has_bias = false;
  OutputType output = OutputType::bf16;
  // Named tuning parameters (the layer's plan: built-in defaults, the tuning database, then
  // LinearOptions::tuning). A kernel takes a parameter missing here from the built-in defaults of
  // `device` (host/tuning/tuning_defaults.hpp).
  std::map<std::string, long long> tuning;
  DeviceKind device = DeviceKind::cpu;

  // "NVFP4 W4A16 linear 4096x4096 (n x k), up to 512 tokens, BF16 out"
  std::string describe() const;
};

// The two call regimes a layer distinguishes by token count.
enum class LinearRegime { decode, prefill };
const char* to_string(LinearRegime r);

// One call's buffers. `bias` is a null buffer when the layer has none.
struct LinearCall {
  const cl::Buffer* x = nullptr;          // BF16 [m, k]
  const cl::Buffer* y = nullptr;          // [m, n], OutputType of the config
  const cl::Buffer* bias = nullptr;       // fp32 [n] or a null buffer
  const cl::Buffer* workspace = nullptr;  // workspace_bytes() bytes
  std::int64_t m = 0;                     // 1 ≤ m ≤ max_tokens
  const std::vector<cl::Event>* wait = nullptr;
  std::vector<cl::Event>* events = nullptr;  // receives the events of the enqueued commands, in order
};

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;

  virtual Verdict is_supported(const Context& ctx) const = 0;
  virtual Verdict can_implement(const LinearConfig& config) const = 0;
  // Whether the strategy was designed for the regime on devices of this kind (automatic selection
  // only; a forced strategy serves every call).
  virtual Verdict designed_for(LinearRegime regime, DeviceKind device) const = 0;
  // Whether automatic selection may take the strategy on this device (a forced strategy runs
  // wherever is_supported says): `mma` only where its MMA is native, not emulated.
  virtual Verdict selectable(const DeviceInfo& device) const {
    (void)device;
    return Verdict::yes();
  }

  // Once, at load: builds the kernels and takes (or makes and uploads) the weight layout it reads.
  virtual void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
                       WeightLayouts& layouts) = 0;
  // Device memory the calls need besides the weights, for config.max_tokens tokens.
  virtual std::size_t workspace_bytes() const = 0;
  // Enqueues one call on ctx's queue. Creates no buffer.
  virtual void apply(const Context& ctx, const LinearCall& call) = 0;

  // Bytes of prepared weights (codes and scales) one call streams.
  virtual std::uint64_t weight_bytes() const = 0;
  // The names of the tuning parameters it reads from LinearConfig::tuning.
  virtual std::vector<std::string> tuning_parameters() const = 0;
  // The strategy's name and tuning, e.g. "gemv_rows(GEMV_TOKENS=4, local=1)".
  virtual std::string describe() const = 0;
};

// The value of tuning parameter `name` in the config, else the built-in default of the config's
// device class for `strategy` (its name in the registry). Throws fp4cl::Error when there is none.
long long linear_tuning_value(const LinearConfig& config, const std::string& strategy, const std::string& name);

using LinearKernelRegistry = KernelRegistry<LinearKernel, LinearConfig>;

// The linear strategies in priority order (FP4CL_LINEAR_KERNEL names one).
const LinearKernelRegistry& linear_kernels();

}  // namespace fp4cl
