// Tuning of the MoE strategies (decode, grouped, split, mma): their tiles per token bucket
// (tune_moe_candidates.hpp says which parameters at which bucket), and the weight layout (vec,
// group), which one layer shares between its strategies: it is tuned at the first bucket and then
// held for the others; so are mma's parameters for chunks of few pairs (few_split_k, unroll, fc2_unroll) for
// its buckets of many. Candidates reach the layer through FP4CL_MOE_TILES (the MoE layer's tuning
// hook) with the strategy forced by MoeConfig::kernel; each is checked against the scalar
// reference before it is timed.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"
#include "kernels/moe_registry.hpp"
#include "reference_checks.hpp"
#include "synthetic_data.hpp"
#include "timing.hpp"
#include "tune_incumbent.hpp"
#include "tune_moe_candidates.hpp"
#include "tune_targets.hpp"
#include "tuning/moe_tuning.hpp"
#include "tuning_search.hpp"

namespace fp4cl::bench {

namespace {

template <typename T>
cl::Buffer buffer(const Context& ctx, const std::vector<T>& host) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, host.size() * sizeof(T),
               const_cast<T*>(host.data()), &err);
  if (err != CL_SUCCESS) throw Error("allocating a tuning buffer", err);
  return b;
}

}  // namespace

std::vector<tuning::Entry> tune_moe(const Context& ctx, const QuantScheme& scheme, const MoeTuneShape& shape,
                                    const TuneSettings& settings) {
  const Fp4Experts experts = make_experts(scheme.weight, shape.hidden, shape.inter, shape.experts, 1);
  std::vector<std::int64_t> buckets = settings.buckets;
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  const std::int64_t max_bucket = buckets.back();
  const DeviceInfo& device = ctx.info();
  cl_uint width = 1;
  ctx.device().getInfo(CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &width);
  const MoeProblem problem{scheme, shape.hidden, shape.inter, shape.experts, shape.topk};
  const std::vector<std::string> strategies = moe_tune_strategies(device, width, problem, settings.moe_kernels);
  std::string names;
  for (const std::string& s : strategies) names += (names.empty() ? "" : ", ") + s;
  settings.log(fmt::format("moe H={} I={} E={} k={} {}: tuning {}", shape.hidden, shape.inter, shape.experts,
                           shape.topk, tuning::scheme_key(scheme), names));
  const tuning::LookupKey key =
      tuning::moe_lookup_key({scheme, shape.hidden, shape.inter, shape.experts, shape.topk});
  if (const std::string note = untuned_buckets_note(settings.database.get(), device, key, buckets); !note.empty())
    settings.log(note);
  std::vector<tuning::Entry> entries;
  tuning::Params layout;    // vec and group, fixed after the first bucket
  tuning::Params mma_few;   // mma's few_split_k, unroll, fc2_unroll: fixed after its first few-pairs bucket
  for (std::int64_t tokens : buckets) {
    const std::vector<std::uint16_t> x = make_activations(tokens, shape.hidden, 99 + static_cast<std::uint64_t>(tokens));
    std::vector<Routing> routing;
    std::vector<cl::Buffer> ids, weights;
    for (int r = 0; r < 16; ++r) {
      routing.push_back(make_routing(tokens, shape.topk, shape.experts, 1000 + static_cast<std::uint64_t>(r)));
      ids.push_back(buffer(ctx, routing.back().ids));
      weights.push_back(buffer(ctx, routing.back().weights));
    }
    const cl::Buffer xb = buffer(ctx, x);
    cl_int err = CL_SUCCESS;
    const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, static_cast<std::size_t>(tokens * shape.hidden) * 2,
                         nullptr, &err);
    if (err != CL_SUCCESS) throw Error("allocating the tuning output", err);

    // The reference for the check, computed at the first candidate that runs and kept for the
    // others (the same inputs, scheme and routing).
    std::optional<MoeCheckReference> reference;
    tuning::Entry best;
    // Where the bucket's time went (seconds of wall clock): layer creation (weights prepared and
    // uploaded, kernels built), the reference check, the timed calls.
    double create_s = 0.0, check_s = 0.0, time_s = 0.0;
    const auto since = [](std::chrono::steady_clock::time_point t0) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double best_us = 0.0, default_us = 0.0, expert_bytes = 0.0, best_bytes = 0.0;
    int tried = 0;
    // Each strategy's search result, and the evaluation that timed it (for the final comparison).
    struct Finalist {
      std::string strategy;
      tuning::Params params;
      double us = 0.0, bytes = 0.0;
      std::size_t evaluator = 0;
    };
    std::vector<Finalist> finalists;
    std::vector<Evaluate> evaluators;
    std::vector<std::string> evaluated;  // evaluators[i]'s strategy
    for (const std::string& strategy : strategies) {
      const bool mma = strategy == "mma";
      // Decode streams an expert's weights for every (token, expert) pair: past a few hundred
      // pairs it cannot compete, and a call would take seconds.
      if (strategy == "decode" && tokens * shape.topk > 256) continue;
      tuning::Params start;
      try {
        start = moe_default_params(device, width, problem, strategy);
      } catch (const Error& e) {
        settings.log(fmt::format("  {} skipped at T={}: {}", strategy, tokens, e.what()));
        continue;
      }
      for (const auto& [k, v] : layout) start[k] = v;
      const bool few = mma && mma_few_pairs_bucket(tokens, shape.topk, shape.experts, start.at("tile_m"));
      const bool routed = mma && mma_routed_bucket(tokens, shape.topk, few);
      // FC2's chunks ahead explicit, as far as FC1's (what 0 would give), so that the unroll axis
      // moves FC1 alone and fc2_unroll FC2 alone: with 0 (unroll's) on the unroll axis both moved
      // and a gain in one kernel could hide behind a loss in the other (on an H200, mixtral-8x7b
      // W4A16 T = 1: unroll 4 FC1 43.5 + FC2 27.4 µs against 8's 47.4 + 24.3; FC1 4 with FC2 8 70
      // µs against 74).
      if (few) start["fc2_unroll"] = start.at("unroll");
      if (routed) {  // automatic
        start["routed_row_tiles"] = start["routed_row_loop"] = start["token_fc2_warp_tiles"] = 0;
        if (!problem.scheme.w4a16()) start["routed_warp_tiles"] = 0;  // W4A4's routed FC1 only
      }
      if (mma && !few)
        for (const auto& [k, v] : mma_few) start[k] = v;
      const Evaluate evaluate = [&, strategy](const tuning::Params& params) {
        Trial t;
        if (std::string why = moe_candidate_refusal(device, width, problem, strategy, params); !why.empty()) {
          t.refused = true;
          t.note = "refused: " + why;
          settings.log(fmt::format("  skipped {} {}: {}", strategy, params_text(params), why));
          return t;
        }
        MoeConfig config;
        config.scheme = scheme;
        config.top_k = shape.topk;
        config.max_tokens = max_bucket;
        config.kernel = strategy;
        std::unique_ptr<MoeLayer> layer;
        auto t0 = std::chrono::steady_clock::now();
        try {
          const ScopedTiles tiles(moe_tiles_env(strategy, params));
          layer = std::make_unique<MoeLayer>(MoeLayer::create(ctx, experts, config));
          expert_bytes = static_cast<double>(layer->expert_weight_bytes());
          create_s += since(t0);
        } catch (const Error& e) {
          create_s += since(t0);
          t.note = fmt::format("refused: {}", e.what());
          settings.log(fmt::format("  {} {} failed to build: {}", strategy, params_text(params), e.what()));
          return t;
        }
        t0 = std::chrono::steady_clock::now();
        try {
          layer->forward_topk(xb, ids[0], weights[0], out, tokens);
          std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens * shape.hidden));
          const cl_int rerr = ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, y.size() * 2, y.data());
          if (rerr != CL_SUCCESS) throw Error("reading the MoE output back", rerr);
          if (!reference) reference = moe_check_reference(experts, config, x, routing[0], tokens);
          check_moe_output(*reference, y, {});
          check_s += since(t0);
        } catch (const Error& e) {
          check_s += since(t0);
          t.note = e.what();
          settings.log(fmt::format("  CHECK FAILED {} {}: {}", strategy, params_text(params), e.what()));
          return t;
        }
        t0 = std::chrono::steady_clock::now();
        const Timing timing = time_calls(ctx, Warmup{settings.warmup, settings.warmup_ms}, settings.iters, [&](int i) {
          const std::size_t r = static_cast<std::size_t>(i) % routing.size();
          return layer->enqueue_topk(xb, ids[r], weights[r], out, tokens).events();
        });
        time_s += since(t0);
        t.ok = true;
        t.us = timing.median_us;
        t.bytes = expert_bytes;
        return t;
      };
      evaluators.push_back(evaluate);
      evaluated.push_back(strategy);
      const std::vector<ParamAxis> axes =
          moe_axes(strategy, layout.empty(), few, device.kind, routed, !problem.scheme.w4a16());
      const SearchResult r = coordinate_descent(start, axes, evaluate, settings.max_passes, settings.max_candidates);
      tried += static_cast<int>(r.trials.size());
      if (mma && few && mma_few.empty() && r.best.ok)
        mma_few = {{"few_split_k", r.best.params.at("few_split_k")},
                   {"unroll", r.best.params.at("unroll")},
                   {"fc2_unroll", r.best.params.at("fc2_unroll")}};
      if (r.start.ok && (default_us == 0.0 || r.start.us < default_us)) default_us = r.start.us;
      if (r.best.ok) finalists.push_back({strategy, r.best.params, r.best.us, r.best.bytes, evaluators.size() - 1});
    }
    // The entry the bucket's calls took before tuning, timed by its strategy's evaluator: one more
    // finalist. Not where its strategy is not tuned here, it names no weight layout, or it names
    // another one than the buckets before held.
    std::string database_result;
    if (const std::optional<Incumbent> inc = incumbent_entry(settings.database.get(), device, key, tokens)) {
      const tuning::Params& p = inc->entry.params;
      const auto at = std::find(evaluated.begin(), evaluated.end(), inc->entry.kernel);
      std::string why;
      if (at == evaluated.end())
        why = fmt::format("its strategy {} is not tuned here", inc->entry.kernel);
      else if (p.count("vec") == 0 || p.count("group") == 0)
        why = "it names no weight layout (vec, group)";
      else if (!layout.empty() && (p.at("vec") != layout.at("vec") || p.at("group") != layout.at("group")))
        why = fmt::format("its weight layout (vec {}, group {}) is not the one held since the first bucket",
                          p.at("vec"), p.at("group"));
      std::optional<Trial> t;
      if (why.empty()) {
        const std::size_t i = static_cast<std::size_t>(at - evaluated.begin());
        t = evaluators[i](p);
        ++tried;
        if (t->ok) finalists.push_back({inc->entry.kernel, p, t->us, t->bytes, i});
      }
      database_result = incumbent_text(*inc, t ? &*t : nullptr, why);
    }
    // The strategies' winners against each other: one timing each decided (a quiet moment for one
    // would). The two fastest are timed again, alternating twice, and the better of each one's
    // three timings decides.
    std::sort(finalists.begin(), finalists.end(), [](const Finalist& a, const Finalist& b) { return a.us < b.us; });
    if (finalists.size() >= 2) {
      Finalist& a = finalists[0];
      Finalist& b = finalists[1];
      for (int round = 0; round < 2; ++round)
        for (Finalist* f : {&a, &b}) {
          const Trial t = evaluators[f->evaluator](f->params);
          if (t.ok) f->us = std::min(f->us, t.us);
          ++tried;
        }
      if (b.us < a.us) std::swap(a, b);
      settings.log(fmt::format("  {} {:.1f} us against {} {:.1f} us, timed again side by side", a.strategy, a.us,
                               b.strategy, b.us));
    }
    if (!finalists.empty()) {
      best_us = finalists[0].us;
      best.kernel = finalists[0].strategy;
      best.params = finalists[0].params;
      best_bytes = finalists[0].bytes;
    }
    if (best_us == 0.0)
      throw Error(fmt::format("tuning MoE H={} I={} E={} k={} {} at {} tokens: no candidate passed", shape.hidden,
                              shape.inter, shape.experts, shape.topk, tuning::scheme_key(scheme), tokens));
    if (layout.empty()) layout = {{"vec", best.params.at("vec")}, {"group", best.params.at("group")}};
    best.op = "moe";
    best.scheme = tuning::scheme_key(scheme);
    best.shape = {{"hidden", shape.hidden}, {"inter", shape.inter}, {"experts", shape.experts}, {"topk", shape.topk}};
    best.tokens = tokens;
    double distinct = 0.0;
    for (const Routing& r : routing) distinct += static_cast<double>(distinct_experts(r));
    best.measured.us = best_us;
    best.measured.gbps = best_bytes * distinct / static_cast<double>(routing.size()) / (best_us * 1e-6) * 1e-9;
    best.measured.gflops = 2.0 * static_cast<double>(tokens) * shape.topk * 3.0 * static_cast<double>(shape.hidden) *
                           static_cast<double>(shape.inter) / (best_us * 1e-6) * 1e-9;
    settings.log(fmt::format("moe H={} I={} E={} k={} {} T={}: {} {} {:.1f} us ({:.2f} GB/s, {:.1f} GFLOP/s); best "
                             "default {:.1f} us{}; {} trials ({:.1f} s creating layers, {:.1f} s checking, {:.1f} s "
                             "timing)",
                             shape.hidden, shape.inter, shape.experts, shape.topk, best.scheme, tokens, best.kernel,
                             params_text(best.params), best_us, best.measured.gbps, best.measured.gflops, default_us,
                             database_result, tried, create_s, check_s, time_s));
    entries.push_back(best);
  }
  return entries;
}

}  // namespace fp4cl::bench
