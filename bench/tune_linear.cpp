// Tuning of the linear kernel strategies (kernels/linear_*.cl): for each token bucket, every
// strategy that is meant for it, by coordinate descent over its parameters (tuning_search.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "bench_options.hpp"
#include "common/formats.cl"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"
#include "reference_checks.hpp"
#include "synthetic_data.hpp"
#include "timing.hpp"
#include "tune_incumbent.hpp"
#include "tune_targets.hpp"
#include "tuning/tuning_defaults.hpp"
#include "tuning_search.hpp"

namespace fp4cl::bench {

namespace {

// The values tried per parameter, by strategy and device class. Parameters that do not act at a
// token count are left out there (GEMV_TOKENS below 3 tokens: those calls use the one- and
// two-token kernels).
std::vector<ParamAxis> linear_axes(const std::string& kernel, DeviceKind kind, std::int64_t tokens, bool w4a4) {
  const bool cpu = kind == DeviceKind::cpu;
  if (kernel == "gemv_rows") {
    std::vector<ParamAxis> axes = {{"GEMV_DECODE_LUT", {0, 1}}, {"FP4CL_VEC", {8, 16}}};
    axes.push_back({"GEMV_LOCAL", cpu ? std::vector<long long>{1, 2, 4, 8} : std::vector<long long>{32, 64, 128, 256}});
    if (tokens >= 3) axes.push_back({"GEMV_TOKENS", {2, 4, 8, 16}});
    return axes;
  }
  if (kernel == "gemv_split") {
    // SPLIT_TOKENS only acts above one token; SPLIT_STAGE keeps its default (it must hold one
    // step of SPLIT_TOKENS tokens: 8 × 32 × 32 floats at most here).
    std::vector<ParamAxis> axes = {{"SPLIT_LANES", {8, 16, 32}},
                                   {"SPLIT_LOCAL", cpu ? std::vector<long long>{32, 64} : std::vector<long long>{64, 128, 256}},
                                   {"SPLIT_RPG", {1, 2, 4}}};
    if (tokens >= 2) axes.push_back({"SPLIT_TOKENS", {2, 4, 8}});
    return axes;
  }
  if (kernel == "mma") {
    // MMA_KSPLIT values that do not divide K / 64 are refused (and skipped); 0 is the shape's own.
    std::vector<ParamAxis> axes = {{"MMA_KSPLIT", {0, 1, 2, 4, 8, 16}}, {"MMA_UNROLL", {1, 2, 4, 8}}};
    if (tokens > 8) axes.push_back({"MMA_NT", {1, 2, 4, 8}});
    if (tokens >= 64) {
      axes.push_back({"MMA_MT", {1, 2, 4}});
      axes.push_back({"MMA_RT", {1, 2, 4}});
    }
    if (w4a4 && tokens <= 8) axes.push_back({"MMA_QUANT_TOKENS", {0, tokens}});
    return axes;
  }
  if (kernel == "gemm_tiled") {
    return {{"GEMM_TILE_M", {32, 64, 128, 256}},
            {"GEMM_TILE_N", cpu ? std::vector<long long>{16, 32, 64} : std::vector<long long>{32, 64, 128}},
            {"GEMM_TILE_K", {64, 128, 256}},
            {"GEMM_WI_M", {2, 4, 8}},
            {"GEMM_WI_N", {1, 2}},
            {"FP4CL_VEC", {8, 16}}};
  }
  return {};
}

std::vector<float> widen(const std::vector<std::uint16_t>& bf16) {
  std::vector<float> out(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_to_float(bf16[i]);
  return out;
}

cl::Buffer buffer(const Context& ctx, std::size_t bytes, const void* host) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
               const_cast<void*>(host), &err);
  if (err != CL_SUCCESS) throw Error("allocating a tuning buffer", err);
  return b;
}

}  // namespace

std::vector<tuning::Entry> tune_linear(const Context& ctx, const QuantScheme& scheme, std::int64_t n, std::int64_t k,
                                       const TuneSettings& settings) {
  const DeviceKind kind = ctx.info().kind;
  std::vector<Fp4Weight> weights{make_linear_weight(scheme.weight, n, k, 1)};
  const double bytes_per_copy = static_cast<double>(n * k / 2 + n * k / block_size(scheme.weight));
  const std::size_t copies = copies_for_rotation(settings.rotation_bytes, bytes_per_copy, 16);
  for (std::size_t c = 1; c < copies; ++c) weights.push_back(make_linear_weight(scheme.weight, n, k, c + 1));

  const tuning::LookupKey key{"linear", tuning::scheme_key(scheme), {{"n", n}, {"k", k}}};
  if (const std::string note = untuned_buckets_note(settings.database.get(), ctx.info(), key, settings.buckets);
      !note.empty())
    settings.log(note);
  std::vector<tuning::Entry> entries;
  for (std::int64_t tokens : settings.buckets) {
    const std::vector<std::uint16_t> x = make_activations(tokens, k, 99 + static_cast<std::uint64_t>(tokens));
    const cl::Buffer xb = buffer(ctx, x.size() * 2, x.data());
    const cl::Buffer yb = buffer(ctx, static_cast<std::size_t>(tokens * n) * 2, nullptr);
    // Below 8 tokens a call is plainly decode: strategies not meant for it are not tried (a tiled
    // GEMM would leave most of each tile idle). From 8 tokens on every strategy competes.
    const bool decode_only = tokens < 8;
    tuning::Entry best;
    double best_us = 0.0, default_us = 0.0;
    int tried = 0;
    std::map<std::string, Evaluate> evaluators;  // by kernel, for the database's entry below
    for (const std::string& kernel : linear_kernels().names()) {
      const std::unique_ptr<LinearKernel> candidate = linear_kernels().instantiate(kernel);
      // Not chosen automatically on this device (mma's emulated MMA): a tuned entry may not name it.
      if (!candidate->selectable(ctx.info())) continue;
      if (decode_only && !candidate->designed_for(LinearRegime::decode, kind)) continue;
      const Evaluate evaluate = [&, kernel](const tuning::Params& params) {
        Trial t;
        std::vector<Linear> layers;
        try {
          LinearOptions o;
          o.max_tokens = tokens;
          o.kernel = kernel;
          o.tuning = params;
          for (const Fp4Weight& w : weights) layers.push_back(Linear::create(ctx, w, scheme, o));
        } catch (const Error& e) {
          t.note = fmt::format("refused: {}", e.what());
          return t;
        }
        try {
          std::vector<std::uint16_t> y;
          layers[0].run(x, tokens, y);
          check_linear_output(scheme, weights[0], x, tokens, widen(y), true, settings.check_samples);
        } catch (const Error& e) {
          t.note = e.what();
          settings.log(fmt::format("  CHECK FAILED {} {}: {}", kernel, params_text(params), e.what()));
          return t;
        }
        const Timing timing =
            time_calls(ctx, per_copy(Warmup{settings.warmup, settings.warmup_ms}, copies), settings.iters, [&](int i) {
              Linear& layer = layers[static_cast<std::size_t>(i) % copies];
              layer.enqueue(xb, yb, tokens);
              return layer.last_events();
            });
        t.ok = true;
        t.us = timing.median_us;
        return t;
      };
      evaluators[kernel] = evaluate;
      const SearchResult r = coordinate_descent(tuning::linear_default_params(kind, kernel),
                                                linear_axes(kernel, kind, tokens, !scheme.w4a16()), evaluate,
                                                settings.max_passes, settings.max_candidates);
      tried += static_cast<int>(r.trials.size());
      if (r.start.ok && (default_us == 0.0 || r.start.us < default_us)) default_us = r.start.us;
      if (r.best.ok && (best_us == 0.0 || r.best.us < best_us)) {
        best_us = r.best.us;
        best.kernel = kernel;
        best.params = r.best.params;
      }
    }
    // The entry the bucket's calls took before tuning, timed as one more candidate (not where its
    // kernel was not tuned at this bucket).
    std::string database_result;
    if (const std::optional<Incumbent> inc = incumbent_entry(settings.database.get(), ctx.info(), key, tokens)) {
      const auto at = evaluators.find(inc->entry.kernel);
      std::optional<Trial> t;
      if (at != evaluators.end()) {
        t = at->second(inc->entry.params);
        ++tried;
        if (t->ok && (best_us == 0.0 || t->us < best_us)) {
          best_us = t->us;
          best.kernel = inc->entry.kernel;
          best.params = inc->entry.params;
        }
      }
      database_result = incumbent_text(
          *inc, t ? &*t : nullptr,
          t ? "" : fmt::format("its kernel {} is not tuned at {} tokens", inc->entry.kernel, tokens));
    }
    if (best_us == 0.0) throw Error(fmt::format("tuning linear {}x{} {} at {} tokens: no candidate passed", n, k,
                                                tuning::scheme_key(scheme), tokens));
    best.op = "linear";
    best.scheme = tuning::scheme_key(scheme);
    best.shape = {{"n", n}, {"k", k}};
    best.tokens = tokens;
    best.measured.us = best_us;
    best.measured.gbps = bytes_per_copy / (best_us * 1e-6) * 1e-9;
    best.measured.gflops = 2.0 * static_cast<double>(tokens * n) * static_cast<double>(k) / (best_us * 1e-6) * 1e-9;
    settings.log(fmt::format("linear {}x{} {} T={}: {} {} {:.1f} us ({:.2f} GB/s, {:.1f} GFLOP/s); best default {:.1f} "
                             "us{}; {} trials",
                             n, k, best.scheme, tokens, best.kernel, params_text(best.params), best_us,
                             best.measured.gbps, best.measured.gflops, default_us, database_result, tried));
    entries.push_back(best);
  }
  return entries;
}

}  // namespace fp4cl::bench
