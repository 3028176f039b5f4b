#include "tune_incumbent.hpp"

#include <fmt/format.h>

namespace fp4cl::bench {

std::optional<Incumbent> incumbent_entry(const tuning::TuningStore* store, const DeviceInfo& device,
                                         const tuning::LookupKey& key, std::int64_t tokens) {
  if (store == nullptr) return std::nullopt;
  const tuning::Match m = store->lookup(device, key);
  if (m.entries.empty()) return std::nullopt;
  const tuning::Entry& e = tuning::nearest_bucket(m.entries, tokens);
  return Incumbent{e, fmt::format("bucket {} of {}{}", e.tokens, e.origin, m.note.empty() ? "" : "; " + m.note)};
}

}  // namespace fp4cl::bench
