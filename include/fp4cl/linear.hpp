// An FP4 linear layer, y = x · Wᵀ (+ bias), for NVFP4 and MXFP4 weights with BF16 activations
// (W4A16) or activations quantized to the weight's FP4 format on the fly (W4A4).
//
//   fp4cl::Context ctx = fp4cl::Context::create();
//   fp4cl::Linear layer = fp4cl::Linear::create(ctx, weight, {WeightFormat::nvfp4, Activations::bf16});
//   cl::Event done = layer.enqueue(x, y, m);        // device buffers, asynchronous
//   layer.run(x_host, m, y_host);                    // host arrays, synchronous
//
// The layer prepares its weights once, at creation (device layouts, uploaded), selects its kernels
// (FP4CL_LINEAR_KERNEL or LinearOptions::kernel forces one) and owns every buffer a call needs, so
// enqueue() creates no buffer. Numerics: ../shared/spec/FP4.md §3–§4 and §7; under W4A16 the
// integer GEMV of 8-lane CPUs (gemv_int, chosen there) multiplies the activations on an integer
// grid per 16-element chunk (README "Numerics"; FP4CL_W4A16_INT=0 keeps exact products).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"
#include "fp4cl/scheme.hpp"
#include "fp4cl/weights.hpp"

namespace fp4cl {

class Checkpoint;  // fp4cl/checkpoint.hpp

enum class OutputType { bf16, fp32 };
const char* to_string(OutputType t);

struct LinearOptions {
  // The number of tokens (rows of x) the layer's workspace holds. A call with more tokens runs in
  // chunks of max_tokens through staging buffers (allocated on first need), never refused.
  std::int64_t max_tokens = 512;
  OutputType output = OutputType::bf16;
  // Bias [n] added to every output row (fp32; a BF16 bias converts exactly). Empty: no bias.
  std::vector<float> bias;
  // Forces one kernel strategy by name for every call ("" = FP4CL_LINEAR_KERNEL, else automatic).
  std::string kernel;
  // 0 (default): the tuning database decides which kernel serves which token counts (one tuned
  // choice per power-of-two token bucket; see README "Tuning"), else the device class's default
  // crossover. N > 0: calls with at most N tokens use the decode kernel, larger ones the prefill
  // kernel, with the built-in parameters (the database is not consulted).
  std::int64_t decode_max_tokens = 0;
  // Tuning parameters by name (e.g. {"GEMM_TILE_M", 64}). They override the tuning database and
  // the built-in defaults in every kernel that takes them; a name no kernel takes is an error.
  std::map<std::string, long long> tuning;
};

class Linear {
 public:
  // Validates everything (shapes, scale bytes, global scales, scheme against weight format) and
  // throws fp4cl::Error naming the argument and what was expected. Under W4A16 the weight's
  // input scales are ignored; under W4A4 (NVFP4) input_global_scale (quant direction) quantizes
  // the activations and input_scale (dequant direction) gives the output factor alpha =
  // input_scale × global_scale (one fp32 product); both must be positive, finite and reciprocals
  // up to rounding. MXFP4 carries no global scale (all must be 1).
  static Linear create(const Context& ctx, const Fp4Weight& weight, const QuantScheme& scheme,
                       const LinearOptions& options = {});

  // The quantized linear module `module` of a checkpoint ("model.layers.0.self_attn.q_proj"):
  // its weight and scheme as Checkpoint::load_linear() gives them, then create(). Throws
  // fp4cl::Error naming the module when the checkpoint has no such quantized module.
  static Linear from_checkpoint(const Context& ctx, const Checkpoint& checkpoint, std::string_view module,
                                const LinearOptions& options = {});

  // Enqueues y = x · Wᵀ (+ bias) on the context's queue after `wait` and returns the event of the
  // call's last command. x: BF16 [m, k] (at least m·k·2 bytes); y: [m, n] of the output type;
  // both made in the layer's OpenCL context (Context::opencl_context(); fp4cl::Error otherwise).
  // 0 ≤ m < 2^31; m = 0 enqueues only a marker; m > max_tokens runs in chunks, each copied through
  // the layer's staging buffers (device-to-device copies). Each call runs after the previous one
  // (its calls share the layer's workspace) because the context's queue is in order, without a
  // wait list between them or between a call's commands. A Linear is not thread-safe: one thread
  // enqueues at a time.
  cl::Event enqueue(const cl::Buffer& x, const cl::Buffer& y, std::int64_t m,
                    const std::vector<cl::Event>& wait = {});

  // Host arrays, synchronous: x holds m·k BF16 values; y is resized to m·n values. The overload
  // must match the output type.
  void run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<std::uint16_t>& y);
  void run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<float>& y);

  std::int64_t n() const;
  std::int64_t k() const;
  const QuantScheme& scheme() const;
  const LinearOptions& options() const;

  // For benchmarks: the events of the commands of the last enqueue (activation pass, matmul; the
  // staging copies too when it ran beyond max_tokens), in order, and the bytes of prepared
  // weights (codes and block scales) that one call streams.
  const std::vector<cl::Event>& last_events() const;
  std::uint64_t weight_bytes() const;
  // The kernel strategy that serves a call of m tokens; that kernel with its tuning parameters
  // and where they come from ("gemv_rows(GEMV_TOKENS=4, ...) [tuned bucket 1 (file)]"); and a
  // one-line description of the layer (every token range with its kernel).
  std::string kernel_name(std::int64_t m) const;
  std::string kernel_description(std::int64_t m) const;
  std::string describe() const;

  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

 private:
  struct State;
  explicit Linear(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fp4cl
