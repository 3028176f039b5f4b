#include "tuning/tuning_lookup.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "support/check.hpp"

namespace fp4cl::tuning {

namespace {

bool same_device_model(const DeviceIdentity& a, const DeviceIdentity& b) {
  return a.platform == b.platform && a.vendor == b.vendor && a.name == b.name && a.compute_units == b.compute_units;
}

// Another model of the same platform, vendor and device class (CPU, GPU); CPUs also of the same
// known SIMD width (float_width): PoCL names an AVX-512 and an AVX2 EPYC alike but for the target,
// and kernels tuned for the one run up to ten times slower on the other (measured: linear
// 4096x4096 M = 1 W4A16, gemv_words tuned on AVX-512, 13.5 ms on 2 AVX2 cores against 0.8 ms for
// gemv_lanes, the built-in choice there).
bool similar_device(const DeviceIdentity& a, const DeviceIdentity& b) {
  if (a.platform != b.platform || a.vendor != b.vendor || a.kind != b.kind || a.kind == DeviceKind::other) return false;
  return a.kind != DeviceKind::cpu || (a.float_width != 0 && a.float_width == b.float_width);
}

// The entries of `device` with the key, sorted by bucket.
std::vector<const Entry*> entries_of(const DeviceTuning& device, const LookupKey& key) {
  std::vector<const Entry*> out;
  for (const Entry& e : device.entries)
    if (e.op == key.op && e.scheme == key.scheme && e.shape == key.shape) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const Entry* a, const Entry* b) { return a->tokens < b->tokens; });
  return out;
}

// floor(sqrt(v)) for v >= 0, exact for 64-bit integers.
std::int64_t isqrt(std::int64_t v) {
  std::int64_t r = 0;
  for (std::int64_t bit = std::int64_t{1} << 31; bit > 0; bit >>= 1) {
    const std::int64_t t = r + bit;
    if (t <= v / t) r = t;
  }
  return r;
}

}  // namespace

std::string LookupKey::describe() const {
  std::string dims;
  for (const auto& [k, v] : shape) dims += fmt::format(" {}={}", k, v);
  return fmt::format("{} {}{}", op, scheme, dims);
}

Match find_entries(const Database& db, const DeviceIdentity& device, const LookupKey& key) {
  Match m;
  // The running driver's entries first; another driver's only when those have none for the key.
  for (const DeviceTuning& d : db.devices) {
    if (!same_device_model(d.device, device) || d.device.driver != device.driver) continue;
    m.device = &d;
    m.entries = entries_of(d, key);
    if (!m.entries.empty()) return m;
  }
  for (const DeviceTuning& d : db.devices) {
    if (!same_device_model(d.device, device) || d.device.driver == device.driver) continue;
    std::vector<const Entry*> entries = entries_of(d, key);
    if (entries.empty()) continue;
    m.device = &d;
    m.entries = std::move(entries);
    m.note = fmt::format("tuned with driver {}, running driver {}", d.device.driver, device.driver);
    return m;
  }
  // No entry for this device model: a similar device's (same platform, vendor and class, e.g. the
  // shipped PoCL database tuned on another x86 CPU of the same vendor), those with the same
  // compute-unit count first. Better than the class defaults, which no one measured for the shape.
  for (const bool same_units : {true, false}) {
    for (const DeviceTuning& d : db.devices) {
      if (!similar_device(d.device, device) || (d.device.compute_units == device.compute_units) != same_units) continue;
      std::vector<const Entry*> entries = entries_of(d, key);
      if (entries.empty()) continue;
      m.device = &d;
      m.entries = std::move(entries);
      m.similar = true;
      m.note = fmt::format("tuned on a similar device: {}", d.device.describe());
      return m;
    }
  }
  return m;
}

std::int64_t last_tokens_of_bucket(std::int64_t lower, std::int64_t upper) { return isqrt(lower * upper); }

const Entry& nearest_bucket(const std::vector<const Entry*>& entries, std::int64_t tokens) {
  if (entries.empty()) fail("nearest_bucket: no entries");
  for (std::size_t i = 0; i + 1 < entries.size(); ++i)
    if (tokens <= last_tokens_of_bucket(entries[i]->tokens, entries[i + 1]->tokens)) return *entries[i];
  return *entries.back();
}

std::int64_t bucket_of(std::int64_t tokens) {
  std::int64_t b = 1;
  while (b < (std::int64_t{1} << 30) && tokens > last_tokens_of_bucket(b, 2 * b)) b *= 2;
  return b;
}

}  // namespace fp4cl::tuning
