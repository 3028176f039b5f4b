// Strategy "gemv_rows": kernels/linear_gemv.cl, one weight row per work-item (decode).
#include <fmt/format.h>

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
    const long long tokens = tuning_value(config, "GEMV_TOKENS", kDefaultTokens);
    if (tokens < 1 || tokens > 16) return Verdict::no(fmt::format("GEMV_TOKENS = {} is outside 1..16", tokens));
    const long long local = tuning_value(config, "GEMV_LOCAL", 1);
    if (local < 1 || local > 1024) return Verdict::no(fmt::format("GEMV_LOCAL = {} is outside 1..1024", local));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime) const override {
    (void)regime;  // any token count: it reads the weights once per GEMV_TOKENS tokens
    return Verdict::yes();
  }

  std::vector<std::string> tuning_parameters() const override { return {"GEMV_TOKENS", "GEMV_LOCAL", "FP4CL_VEC"}; }

  std::string describe() const override {
    return fmt::format("gemv_rows(GEMV_TOKENS={}, GEMV_LOCAL={}, FP4CL_VEC={})", tokens_, local_, vec_);
  }

 protected:
  std::vector<cl::Kernel> build(const Context& ctx, const LinearConfig& config) override {
    tokens_ = tuning_value(config, "GEMV_TOKENS", kDefaultTokens);
    // PoCL runs a work-group as a loop over its work-items: small groups of long rows are best
    // (DEVICES.md). GPUs want enough work-items per group to fill a multiprocessor.
    local_ = tuning_value(config, "GEMV_LOCAL", ctx.info().kind == DeviceKind::gpu ? 64 : 1);
    vec_ = vector_width(config);
    BuildOptions options = linear_format_options(config.scheme.weight);
    options.define("GEMV_TOKENS", tokens_).define("FP4CL_VEC", vec_);
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
    check_cl(ctx.queue().enqueueNDRangeKernel(run, cl::NullRange, cl::NDRange(global0, groups),
                                              cl::NDRange(local, 1), &wait, &event),
             "enqueueing linear_gemv ({} tokens, n = {}, k = {})", m, layout().n, layout().k);
    return event;
  }

 private:
  static constexpr long long kDefaultTokens = 4;

  long long tokens_ = kDefaultTokens, local_ = 1, vec_ = 16;
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemv_rows_kernel() { return std::make_unique<GemvRowsKernel>(); }

}  // namespace fp4cl
