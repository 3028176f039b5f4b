#include "tune_incumbent.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace fp4cl::bench {

std::optional<Incumbent> incumbent_entry(const tuning::TuningStore* store, const DeviceInfo& device,
                                         const tuning::LookupKey& key, std::int64_t tokens) {
  if (store == nullptr) return std::nullopt;
  const tuning::Match m = store->lookup(device, key);
  if (m.entries.empty()) return std::nullopt;
  const tuning::Entry& e = tuning::nearest_bucket(m.entries, tokens);
  return Incumbent{e, fmt::format("bucket {} of {}{}", e.tokens, e.origin, m.note.empty() ? "" : "; " + m.note)};
}

std::string incumbent_text(const Incumbent& inc, const Trial* trial, const std::string& why) {
  std::string result;
  if (trial != nullptr && trial->ok)
    result = fmt::format("{:.1f} us", trial->us);
  else if (!why.empty())
    result = "not timed: " + why;
  else
    result = "not timed: " + (trial != nullptr && !trial->note.empty() ? trial->note : std::string("it failed"));
  return fmt::format("; database entry ({}: {} {}) {}", inc.label, inc.entry.kernel, params_text(inc.entry.params),
                     result);
}

std::string untuned_buckets_note(const tuning::TuningStore* store, const DeviceInfo& device,
                                 const tuning::LookupKey& key, const std::vector<std::int64_t>& buckets) {
  if (store == nullptr) return {};
  const tuning::Match m = store->lookup(device, key);
  if (m.entries.empty() || (!m.similar && m.device->device.driver == tuning::DeviceIdentity::of(device).driver))
    return {};
  std::string untuned;
  for (const tuning::Entry* e : m.entries)
    if (std::find(buckets.begin(), buckets.end(), e->tokens) == buckets.end())
      untuned += fmt::format("{}{}", untuned.empty() ? "" : ", ", e->tokens);
  if (untuned.empty()) return {};
  return fmt::format("  note: {} has buckets {} from {} ({}), not tuned in this run: this device's entries, once "
                     "written, replace them, and their counts go to the nearest tuned bucket (add them to --tokens "
                     "to tune them)",
                     key.describe(), untuned, m.entries.front()->origin, m.note);
}

}  // namespace fp4cl::bench
