// Strategy "gemm_tiled": kernels/linear_gemm.cl, weight tiles decoded once into local memory and
// reused by every token of a work-group (prefill).
#include <fmt/format.h>

#include "cl/opencl_calls.hpp"
#include "fp4cl/program_cache.hpp"
#include "kernels/linear_build_options.hpp"
#include "kernels/linear_rows_kernel.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

struct GemmTiles {
  long long tile_m, tile_n, tile_k, wi_m, wi_n;
};

class GemmTiledKernel final : public RowsLinearKernel {
 public:
  Verdict is_supported(const Context& ctx) const override {
    (void)ctx;  // plain OpenCL C 1.2 with local memory; tile limits are checked in prepare
    return Verdict::yes();
  }

  Verdict can_implement(const LinearConfig& config) const override {
    if (Verdict v = RowsLinearKernel::can_implement(config); !v) return v;
    const GemmTiles t = tiles(config);
    const long long vec = vector_width(config);
    if (t.wi_n < 1 || t.wi_n > 4) return Verdict::no(fmt::format("GEMM_WI_N = {} is outside 1..4", t.wi_n));
    if (t.tile_n < vec * t.wi_n || t.tile_n % (vec * t.wi_n) != 0)
      return Verdict::no(fmt::format("GEMM_TILE_N = {} is not a positive multiple of FP4CL_VEC × GEMM_WI_N = {} × {}",
                                     t.tile_n, vec, t.wi_n));
    if (t.tile_k < 64 || t.tile_k % 64 != 0)
      return Verdict::no(fmt::format("GEMM_TILE_K = {} is not a positive multiple of 64", t.tile_k));
    if (t.wi_m < 1 || t.wi_m > 16) return Verdict::no(fmt::format("GEMM_WI_M = {} is outside 1..16", t.wi_m));
    if (t.tile_m < t.wi_m || t.tile_m % t.wi_m != 0)
      return Verdict::no(fmt::format("GEMM_TILE_M = {} is not a positive multiple of GEMM_WI_M = {}", t.tile_m, t.wi_m));
    return Verdict::yes();
  }

  Verdict designed_for(LinearRegime regime, DeviceKind device) const override {
    (void)device;
    if (regime == LinearRegime::decode)
      return Verdict::no("a tiled GEMM is for prefill: with few tokens most of each tile is idle and a GEMV "
                         "streams the weights faster");
    return Verdict::yes();
  }

  std::vector<std::string> tuning_parameters() const override {
    return {"GEMM_TILE_M", "GEMM_TILE_N", "GEMM_TILE_K", "GEMM_WI_M", "GEMM_WI_N", "FP4CL_VEC"};
  }

  std::string describe() const override {
    return fmt::format(
        "gemm_tiled(GEMM_TILE_M={}, GEMM_TILE_N={}, GEMM_TILE_K={}, GEMM_WI_M={}, GEMM_WI_N={}, FP4CL_VEC={})",
        tiles_.tile_m, tiles_.tile_n, tiles_.tile_k, tiles_.wi_m, tiles_.wi_n, vec_);
  }

 protected:
  std::vector<cl::Kernel> build(const Context& ctx, const LinearConfig& config) override {
    tiles_ = tiles(config);
    vec_ = vector_width(config);
    const std::uint64_t local_bytes = static_cast<std::uint64_t>(tiles_.tile_k * tiles_.tile_n) * sizeof(float);
    const std::size_t local_items =
        static_cast<std::size_t>((tiles_.tile_n / (vec_ * tiles_.wi_n)) * (tiles_.tile_m / tiles_.wi_m));
    if (local_bytes > ctx.info().local_mem_bytes)
      fail("gemm_tiled: a {}x{} weight panel needs {} bytes of local memory; {} has {}", tiles_.tile_k, tiles_.tile_n,
           local_bytes, ctx.info().name, ctx.info().local_mem_bytes);
    if (local_items > ctx.info().max_work_group_size)
      fail("gemm_tiled: tiles of {} work-items exceed the work-group limit {} of {}", local_items,
           ctx.info().max_work_group_size, ctx.info().name);
    BuildOptions options = linear_format_options(config.scheme.weight);
    options.define("GEMM_TILE_M", tiles_.tile_m)
        .define("GEMM_TILE_N", tiles_.tile_n)
        .define("GEMM_TILE_K", tiles_.tile_k)
        .define("GEMM_WI_M", tiles_.wi_m)
        .define("GEMM_WI_N", tiles_.wi_n)
        .define("FP4CL_VEC", vec_);
    return {ctx.programs().kernel("linear_gemm.cl", "linear_gemm", options)};
  }

  cl::Event launch(const Context& ctx, std::int64_t m, const std::vector<cl::Event>& wait) override {
    const auto local0 = static_cast<std::size_t>(tiles_.tile_n / (vec_ * tiles_.wi_n));
    const auto local1 = static_cast<std::size_t>(tiles_.tile_m / tiles_.wi_m);
    const auto groups0 = static_cast<std::size_t>((layout().n + tiles_.tile_n - 1) / tiles_.tile_n);
    const auto groups1 = static_cast<std::size_t>((m + tiles_.tile_m - 1) / tiles_.tile_m);
    cl::Event event;
    check_cl(opencl::enqueue_kernel(ctx.queue(), kernels()[0], cl::NDRange(groups0 * local0, groups1 * local1),
                                    cl::NDRange(local0, local1), &wait, &event),
             "enqueueing linear_gemm ({} tokens, n = {}, k = {})", m, layout().n, layout().k);
    return event;
  }

 private:
  const char* strategy_name() const override { return "gemm_tiled"; }
  GemmTiles tiles(const LinearConfig& config) const {
    return {tuning_value(config, "GEMM_TILE_M"), tuning_value(config, "GEMM_TILE_N"),
            tuning_value(config, "GEMM_TILE_K"), tuning_value(config, "GEMM_WI_M"), tuning_value(config, "GEMM_WI_N")};
  }

  GemmTiles tiles_{0, 0, 0, 0, 0};
  long long vec_ = 0;
};

}  // namespace

std::unique_ptr<LinearKernel> make_gemm_tiled_kernel() { return std::make_unique<GemmTiledKernel>(); }

}  // namespace fp4cl
