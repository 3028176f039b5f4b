// What `fp4cl-bench tune` tunes: a linear layer shape or an MoE layer shape, for one scheme, at a
// list of token buckets. Each returns one database entry per bucket: the fastest strategy with
// its parameters, every candidate having passed the check against the scalar reference. Where
// TuneSettings::database gives the layer an entry already, that entry is timed as one more
// candidate (tune_incumbent.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/scheme.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl::bench {

struct TuneSettings {
  std::vector<std::int64_t> buckets;  // token counts, usually powers of two
  int iters = 8, warmup = 1;
  double warmup_ms = 100;             // and warm-up calls until this much time has passed (Warmup)
  double rotation_bytes = 0;          // weights streamed between two uses of one copy
  int check_samples = 64;             // linear: random outputs checked per candidate
  int max_passes = 2;                 // coordinate-descent passes
  int max_candidates = 0;             // candidates measured per strategy and bucket, at most (0: no limit)
  // MoE: the strategies to tune (empty: those automatic selection can choose on the device,
  // moe_tune_strategies()).
  std::vector<std::string> moe_kernels;
  // Progress lines (one per bucket, and one per failing candidate).
  std::function<void(const std::string&)> log;
  // The databases layers used before tuning (null: none). The entry each bucket's calls took from
  // them is timed beside the search, and written where it is fastest.
  std::shared_ptr<const tuning::TuningStore> database;
};

std::vector<tuning::Entry> tune_linear(const Context& ctx, const QuantScheme& scheme, std::int64_t n, std::int64_t k,
                                       const TuneSettings& settings);

struct MoeTuneShape {
  std::int64_t hidden = 0, inter = 0, experts = 0;
  int topk = 1;
};
std::vector<tuning::Entry> tune_moe(const Context& ctx, const QuantScheme& scheme, const MoeTuneShape& shape,
                                    const TuneSettings& settings);

}  // namespace fp4cl::bench
