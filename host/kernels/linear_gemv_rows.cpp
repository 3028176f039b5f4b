// Strategy "gemv_rows": kernels/linear_gemv.cl, one weight row per work-item (decode).
#include <fmt/format.h>

#include "cl/opencl_calls.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/linear_build_options.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

class GemvRowsKernel final : public RowsLinearKernel {
 public:
  Verdict is_supported(const Context& ctx) const override {
    (void)ctx;  // plain OpenCL C 1.2, any device
    return Verdict::yes();
  }

  Verdict can_implement(const LinearConfig& config) const override {
    if (Verdict v = RowsLinearKernel::can_implement(config); !v) return v;
    const long long tokens = tuning_value(config, "GEMV_TOKENS");
    if (tokens < 1 || tokens > 16) return Verdict::no(fmt::format("GEMV_TOKENS = {} is outside 1..16", tokens));
    const long long local = tuning_value(config, "GEMV_LOCAL");
    if (local < 1 || local > 1024) return Verdict::no(fmt::format("GEMV_LOCAL = {} is outside 1..1024", local));
    const long long lut = tuning_value(config, "GEMV_DECODE_LUT");
    if (lut != 0 && lut != 1) return Verdict::no(fmt::format("GEMV_DECODE_LUT = {} is not 0 (bit trick) or 1 (table)", lut));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime, DeviceKind device) const override {
    (void)regime;  // any token count and device: it reads the weights once per GEMV_TOKENS tokens
    (void)device;
    return Verdict::yes();
  }

  std::vector<std::string> tuning_parameters() const override { return {"GEMV_TOKENS", "GEMV_LOCAL", "FP4CL_VEC", "GEMV_DECODE_LUT"}; }

  std::string describe() const override {
    return fmt::format("gemv_rows(GEMV_TOKENS={}, GEMV_LOCAL={}, FP4CL_VEC={}, GEMV_DECODE_LUT={})", tokens_, local_,
                       vec_, lut_);
  }

 protected:
  std::vector<cl::Kernel> build(const Context& ctx, const LinearConfig& config) override {
    (void)ctx;
    tokens_ = tuning_value(config, "GEMV_TOKENS");
    local_ = tuning_value(config, "GEMV_LOCAL");
    vec_ = vector_width(config);
    lut_ = tuning_value(config, "GEMV_DECODE_LUT");
    BuildOptions options = linear_format_options(config.scheme.weight);
    options.define("GEMV_TOKENS", tokens_).define("FP4CL_VEC", vec_).define("GEMV_DECODE_LUT", lut_);
    return {ctx.programs().kernel("linear_gemv.cl", "linear_gemv_single", options),
            ctx.programs().kernel("linear_gemv.cl", "linear_gemv_pair", options),
            ctx.programs().kernel("linear_gemv.cl", "linear_gemv_tokens", options)};
  }

  cl::Event launch(const Context& ctx, std::int64_t m, const std::vector<cl::Event>& wait) override {
    // One or two tokens: kernels without unused accumulators.
    const std::int64_t per_item = m <= 2 ? m : tokens_;
    cl::Kernel& run = kernels()[m <= 2 ? static_cast<std::size_t>(m - 1) : 2];
    const auto local = static_cast<std::size_t>(local_);
    const std::size_t n = static_cast<std::size_t>(layout().n);
    const std::size_t global0 = (n + local - 1) / local * local;
    const auto groups = static_cast<std::size_t>((m + per_item - 1) / per_item);
    cl::Event event;
    check_cl(opencl::enqueue_kernel(ctx.queue(), run, cl::NDRange(global0, groups), cl::NDRange(local, 1), &wait, &event),
             "enqueueing linear_gemv ({} tokens, n = {}, k = {})", m, layout().n, layout().k);
    return event;
  }

 private:
  const char* strategy_name() const override { return "gemv_rows"; }

  long long tokens_ = 0, local_ = 0, vec_ = 0, lut_ = 0;
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_rows_kernel() { return std::make_unique<GemvRowsKernel>(); }

}  // namespace fp4cl
