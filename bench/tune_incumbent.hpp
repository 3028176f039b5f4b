// What a layer on the tuned device runs before the tuner writes anything: the entry the databases
// loaded at the tuner's start (shipped, the user's or FP4CL_TUNING_FILE; the device's own entries,
// another driver's or a similar device's, tuning_lookup.hpp) give a layer key at a token count.
// The tuner times it beside its search and writes it where it is fastest, so a tuning run does not
// replace what a device runs with something slower, and its log says how the search compares.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning/tuning_lookup.hpp"
#include "tuning/tuning_store.hpp"
#include "tuning_search.hpp"

namespace fp4cl::bench {

struct Incumbent {
  tuning::Entry entry;  // its strategy or kernel, and parameters
  // Where it comes from: "bucket 8 of tuning/nvidia-h200.json (shipped); tuned on a similar
  // device: NVIDIA H200 (...)".
  std::string label;
};

// The entry `store` gives `key` on `device` for `tokens` tokens (the nearest bucket), or none where
// `store` is null or holds no entry for the key.
std::optional<Incumbent> incumbent_entry(const tuning::TuningStore* store, const DeviceInfo& device,
                                         const tuning::LookupKey& key, std::int64_t tokens);

// The bucket line's words on `inc`: "; database entry (LABEL: KERNEL PARAMS) X us" where `trial`
// ran and passed, else "... not timed: " and `why`, or the trial's note (`trial` null: not run).
std::string incumbent_text(const Incumbent& inc, const Trial* trial, const std::string& why);

// Where the databases give `key` another device's entries (a similar device's, or another driver's
// of this one) at buckets not among `buckets`: a line saying so, else "". Once the tuner writes this
// device's own entries for the key, lookups take those alone, and the counts those buckets served
// go to the nearest tuned one (on 2026-12-05 the H100 lost the H200's bucket 6 that way).
std::string untuned_buckets_note(const tuning::TuningStore* store, const DeviceInfo& device,
                                 const tuning::LookupKey& key, const std::vector<std::int64_t>& buckets);

}  // namespace fp4cl::bench
