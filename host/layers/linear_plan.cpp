#include "layers/linear_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "support/check.hpp"
#include "support/log.hpp"
#include "tuning/tuning_defaults.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl {

namespace {

using tuning::Params;

// Every tuning parameter must be one some linear kernel takes (a typo would otherwise be ignored).
void check_tuning_names(const LinearKernelRegistry& registry, const std::map<std::string, long long>& tuning) {
  if (tuning.empty()) return;
  std::set<std::string> known;
  for (const std::string& name : registry.names())
    for (const std::string& p : registry.instantiate(name)->tuning_parameters()) known.insert(p);
  for (const auto& [name, value] : tuning) {
    if (known.count(name)) continue;
    std::string valid;
    for (const std::string& p : known) valid += (valid.empty() ? "" : ", ") + p;
    fail("LinearOptions::tuning: unknown parameter '{}' (= {}); the linear kernels take: {}", name, value, valid);
  }
}

// The complete parameters of `kernel`: the device class's defaults, then `tuned`, then the caller's
// (each only for the names the strategy takes).
Params params_for(const LinearKernelRegistry& registry, DeviceKind kind, const std::string& kernel,
                  const Params& tuned, const Params& caller) {
  const std::vector<std::string> names = registry.instantiate(kernel)->tuning_parameters();
  const auto takes = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  Params p = tuning::linear_default_params(kind, kernel);
  for (const auto& [k, v] : tuned) {
    if (takes(k)) p[k] = v;
    else log::warn("tuning database: linear kernel '{}' has no parameter '{}' (= {}); ignored", kernel, k, v);
  }
  for (const auto& [k, v] : caller)
    if (takes(k)) p[k] = v;
  return p;
}

LinearConfig with_params(const LinearConfig& base, const Params& params) {
  LinearConfig c = base;
  c.tuning = params;
  return c;
}

// Merges consecutive steps that run the same strategy with the same parameters.
void merge_steps(LinearPlan& plan) {
  std::vector<LinearPlanStep> merged;
  for (LinearPlanStep& s : plan.steps) {
    if (!merged.empty() && merged.back().kernel == s.kernel && merged.back().config.tuning == s.config.tuning) {
      const std::string origin = merged.back().origin == s.origin ? s.origin : merged.back().origin + ", " + s.origin;
      merged.back().last_tokens = s.last_tokens;
      merged.back().origin = origin;
      continue;
    }
    merged.push_back(std::move(s));
  }
  plan.steps = std::move(merged);
}

// The smallest token count tuned entries serve: 1 where the smallest bucket is 1, else the
// first count past the share a bucket half its size would have (bucket 64: 46, as bucket 32
// would serve up to floor(sqrt(32 · 64)) = 45).
std::int64_t tuned_from(const std::vector<const tuning::Entry*>& entries) {
  const std::int64_t first = entries.front()->tokens;
  return first <= 1 ? 1 : tuning::last_tokens_of_bucket(first / 2, first) + 1;
}

// The largest token count tuned entries serve: every count where the largest bucket is a prefill
// one (above the device class's decode/prefill crossover), else the crossover: decode entries do
// not serve prefill counts. On the H100 the 8-token entries served M = 512 of 28672 x 4096 at 1235
// us (W4A16) and 1297 (W4A4) against the built-in plan's 718 and 742, and M = 64 of 4096 x 4096
// W4A4 at 52.2 against 46.3. On 2 AVX-512 cores (PoCL, 2026-11-28, 2 rounds, ms) the 8-token
// gemv_words entries against the built-in gemm_tiled at M = 96 / 128 / 256 / 512: 4096 x 4096
// W4A16 19.5, 19.0 / 25.7, 25.7 / 52.2, 51.4 / 105.9, 104.2 against 20.0, 19.7 / 22.8, 22.2 / 48.0,
// 45.3 / 94.0, 89.6; W4A4 17.9, 17.9 / 24.2, 23.7 / 47.9, 47.2 / 95.5, 95.1 against 21.0, 19.8 /
// 24.8, 23.8 / 47.6, 45.8 / 92.5, 93.3; 1536 x 2048 W4A16 3.6 / 4.8, 4.7 / 9.5 / 19.2, 19.8 against
// 3.6, 3.8 / 3.6, 3.9 / 7.0, 7.4 / 15.0, 15.5; 2048 x 768 W4A16 1.8, 1.9 / 2.4 / 5.0, 5.1 / 10.3
// against 1.9, 2.0 / 2.1 / 3.9, 4.0 / 7.7, 8.3 (W4A4 alike; at 96 gemm_tiled now takes 17.0-17.2
// at 4096 x 4096 W4A16: it skips the work of the tile's missing tokens). CPUs with narrower
// vectors (AVX2) keep the largest bucket for every larger count: unmeasured there since
// gemm_tiled's register tile.
std::int64_t tuned_until(const std::vector<const tuning::Entry*>& entries, DeviceKind kind, unsigned float_width) {
  const std::int64_t crossover = tuning::linear_default_decode_max_tokens(kind, float_width);
  if (entries.back()->tokens > crossover || (kind == DeviceKind::cpu && !tuning::linear_wide_cpu(kind, float_width)))
    return std::numeric_limits<std::int64_t>::max();
  return crossover;
}

// The plan without tuned entries: decode and prefill strategies around the crossover.
LinearPlan default_plan(const Context& ctx, const LinearConfig& base, const LinearOptions& options,
                        const LinearKernelRegistry& registry, const std::string& forced) {
  const DeviceKind kind = base.device;
  const std::string origin = fmt::format("built-in {} defaults", tuning::default_class_name(kind));
  const std::string description = base.describe();
  LinearPlan plan;
  if (!forced.empty()) {
    const LinearConfig config = with_params(base, params_for(registry, kind, forced, {}, options.tuning));
    registry.create(forced, ctx, config, description);  // refusals are errors
    plan.steps.push_back({base.max_tokens, forced, config, origin, true});
    return plan;
  }
  const DeviceInfo& device = ctx.info();
  const std::int64_t decode_max = options.decode_max_tokens > 0
                                      ? options.decode_max_tokens
                                      : tuning::linear_default_decode_max_tokens(kind, device.preferred_float_width);
  const LinearConfig caller = with_params(base, options.tuning);
  auto designed_for = [kind, &device](LinearRegime regime) {
    return [regime, kind, &device](const LinearKernel& k) {
      if (Verdict v = k.selectable(device); !v) return v;
      return k.designed_for(regime, kind);
    };
  };
  const std::string decode =
      registry.select(ctx, caller, description + " (decode)", designed_for(LinearRegime::decode)).name;
  plan.steps.push_back({std::min(decode_max, base.max_tokens), decode,
                        with_params(base, params_for(registry, kind, decode, {}, options.tuning)), origin, false});
  if (base.max_tokens > decode_max) {
    const std::string prefill =
        registry.select(ctx, caller, description + " (prefill)", designed_for(LinearRegime::prefill)).name;
    plan.steps.push_back({base.max_tokens, prefill,
                          with_params(base, params_for(registry, kind, prefill, {}, options.tuning)), origin, false});
  }
  merge_steps(plan);
  return plan;
}

// The plan from tuned entries, or nothing when an entry names a strategy that is unknown or
// refuses (a database from another build; logged as a warning). Token counts below the smallest
// bucket's share (tuned_from) take the built-in plan: an entry tuned for 64 tokens says nothing
// about one (on the H100 4096 x 4096 W4A16's 64-token winner splits K 4 ways over 2-row-tile
// work-groups, a prefill geometry). Where every bucket is a decode one, counts past the crossover
// take the built-in plan's prefill steps (tuned_until; not on AVX2 CPUs).
bool tuned_plan(const Context& ctx, const LinearConfig& base, const LinearOptions& options,
                const LinearKernelRegistry& registry, const std::string& forced,
                const std::vector<const tuning::Entry*>& entries, LinearPlan& plan) {
  const std::vector<std::string> known = registry.names();
  const std::int64_t below = tuned_from(entries) - 1;
  const std::int64_t above = tuned_until(entries, base.device, ctx.info().preferred_float_width);
  // The built-in plan, made (and its strategies selected) once, where counts below or above the
  // tuned buckets' take it.
  const LinearPlan builtin = below > 0 || above < base.max_tokens
                                 ? default_plan(ctx, base, options, registry, forced)
                                 : LinearPlan{};
  if (below > 0) {
    for (LinearPlanStep s : builtin.steps) {
      if (!plan.steps.empty() && plan.steps.back().last_tokens >= std::min(below, base.max_tokens)) break;
      s.last_tokens = std::min({s.last_tokens, below, base.max_tokens});
      plan.steps.push_back(std::move(s));
    }
    if (below >= base.max_tokens) {
      merge_steps(plan);
      return true;
    }
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const tuning::Entry& e = *entries[i];
    const std::int64_t last = i + 1 < entries.size()
                                  ? tuning::last_tokens_of_bucket(e.tokens, entries[i + 1]->tokens)
                                  : std::numeric_limits<std::int64_t>::max();
    const std::string kernel = forced.empty() ? e.kernel : forced;
    if (forced.empty() && std::find(known.begin(), known.end(), kernel) == known.end()) {
      log::warn("tuning database ({}): unknown linear kernel '{}' for {} tokens; using the built-in defaults", e.origin,
                kernel, e.tokens);
      return false;
    }
    const LinearConfig config =
        with_params(base, params_for(registry, base.device, kernel, e.kernel == kernel ? e.params : Params{},
                                     options.tuning));
    if (!forced.empty()) {
      registry.create(forced, ctx, config, base.describe());  // a refusal of a forced strategy is an error
    } else {
      const std::unique_ptr<LinearKernel> k = registry.instantiate(kernel);
      Verdict v = k->is_supported(ctx);
      if (v) v = k->can_implement(config);
      if (!v) {
        log::warn("tuning database ({}): linear kernel '{}' with the tuned parameters for {} tokens refuses {}: {}; "
                  "using the built-in defaults",
                  e.origin, kernel, e.tokens, base.describe(), v.reason());
        return false;
      }
    }
    plan.steps.push_back({std::min({last, above, base.max_tokens}), kernel, config,
                          fmt::format("tuned bucket {} ({})", e.tokens, e.origin), !forced.empty()});
    if (last >= std::min(above, base.max_tokens)) break;
  }
  for (const LinearPlanStep& s : builtin.steps)
    if (above < base.max_tokens && s.last_tokens > above) plan.steps.push_back(s);
  plan.tuned = true;
  merge_steps(plan);
  return true;
}

}  // namespace

LinearPlan plan_linear_layer(const Context& ctx, const LinearConfig& base, const LinearOptions& options,
                             const LinearKernelRegistry& registry) {
  check_tuning_names(registry, options.tuning);
  const std::string forced = registry.forced_name(options.kernel);
  if (!forced.empty()) {
    const std::vector<std::string> names = registry.names();
    // An unknown forced name is an error that lists the valid ones.
    if (std::find(names.begin(), names.end(), forced) == names.end()) registry.create(forced, ctx, base, base.describe());
  }
  if (options.decode_max_tokens <= 0) {
    const tuning::LookupKey key{"linear", tuning::scheme_key(base.scheme), {{"n", base.n}, {"k", base.k}}};
    const tuning::Match match = tuning::tuning_store()->lookup(ctx.info(), key);
    LinearPlan plan;
    if (!match.entries.empty() && tuned_plan(ctx, base, options, registry, forced, match.entries, plan)) return plan;
  }
  return default_plan(ctx, base, options, registry, forced);
}

}  // namespace fp4cl
