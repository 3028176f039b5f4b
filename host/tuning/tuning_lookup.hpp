// Finding the tuned entries of a layer in a database: the device, then the operation, scheme
// and shape, then the token bucket nearest a call's token count.
//
// A device matches on platform, vendor, name and compute units (a CPU device's name does not
// say how many cores it has). An entry recorded under another driver version still matches when
// no entry of the running driver does; the match then says so (`note`). When neither has an
// entry for the key, a similar device's entries are used: same platform, vendor and device class
// (CPU or GPU), preferring the same compute-unit count (so the shipped PoCL database, tuned on
// one x86 CPU, serves PoCL on another CPU of that vendor); the note names that device. Only then
// do the layers fall back to the built-in class defaults. Shapes match exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tuning/tuning_database.hpp"

namespace fp4cl::tuning {

struct LookupKey {
  std::string op;      // "linear" | "moe"
  std::string scheme;  // scheme_key()
  Shape shape;

  // "linear nvfp4-w4a16 k=4096 n=4096"
  std::string describe() const;
};

struct Match {
  const DeviceTuning* device = nullptr;  // null: no entry of this device in the database
  std::vector<const Entry*> entries;     // the key's entries, by increasing bucket; may be empty
  std::string note;                      // e.g. "tuned with driver 3.0, running 3.1"
  bool similar = false;                  // the entries are a similar device's (see above)
};

Match find_entries(const Database& db, const DeviceIdentity& device, const LookupKey& key);

// The entry whose bucket is nearest `tokens` on a logarithmic scale: bucket b serves the token
// counts m with m² ≤ b·b_next (b_next the next larger bucket) and m² > b_prev·b. Entries must be
// non-empty and sorted by bucket.
const Entry& nearest_bucket(const std::vector<const Entry*>& entries, std::int64_t tokens);

// The largest token count bucket `lower` serves when the next larger bucket is `upper`:
// floor(sqrt(lower · upper)).
std::int64_t last_tokens_of_bucket(std::int64_t lower, std::int64_t upper);

// The power of two nearest `tokens` in the same sense (1 for 1, 4 for 3, 8 for 6, 512 for 400).
std::int64_t bucket_of(std::int64_t tokens);

}  // namespace fp4cl::tuning
