#include "tuning/tuning_store.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "fp4cl/error.hpp"
#include "support/log.hpp"
#include "tuning/embedded_tuning.hpp"
#include "tuning/tuning_defaults.hpp"

namespace fp4cl::tuning {

namespace {

// Reads a whole file; nullopt (and `why`) when it cannot.
bool read_text(const std::string& path, std::string& text, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "cannot open the file for reading";
    return false;
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    why = "reading the file failed";
    return false;
  }
  text = s.str();
  return true;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s.empty() ? std::string("none") : s;
}

}  // namespace

TuningStore::TuningStore(const std::vector<DatabaseSource>& sources, std::vector<std::string> skipped)
    : skipped_(std::move(skipped)) {
  for (const DatabaseSource& source : sources) {
    try {
      Database db = parse_database(source.text, source.name);
      for (DeviceTuning& d : db.devices)
        for (Entry& e : d.entries) e.origin = source.name;
      db_.merge(db);
      loaded_.push_back(source.name);
    } catch (const Error& e) {
      skipped_.push_back(e.what());
      log::warn("tuning database skipped, the layers use the remaining databases or built-in defaults: {}", e.what());
    }
  }
}

std::string TuningStore::user_database_path() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
    return (std::filesystem::path(xdg) / "fp4cl" / "tuning.json").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (std::filesystem::path(home) / ".config" / "fp4cl" / "tuning.json").string();
  return {};
}

TuningStore TuningStore::from_environment() {
  const char* env = std::getenv("FP4CL_TUNING_FILE");
  if (env && std::string(env) == "none") return TuningStore({});
  std::vector<DatabaseSource> sources;
  std::vector<std::string> skipped;
  for (const EmbeddedDatabase& e : embedded_databases())
    sources.push_back({std::string(e.name) + " (shipped)", std::string(e.text)});
  std::string path;
  bool required = false;
  if (env && *env) {
    path = env;
    required = true;
  } else {
    path = user_database_path();
  }
  if (!path.empty()) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    std::string text, why;
    if (exists && read_text(path, text, why)) {
      sources.push_back({path, std::move(text)});
    } else if (required) {
      const std::string problem = exists ? why : "no such file";
      log::warn("FP4CL_TUNING_FILE={}: {}; the layers use the shipped databases or built-in defaults", path, problem);
      skipped.push_back(fmt::format("{}: {}", path, problem));
    }
  }
  return TuningStore(sources, std::move(skipped));
}

Match TuningStore::lookup(const DeviceInfo& device, const LookupKey& key) const {
  const DeviceIdentity identity = DeviceIdentity::of(device);
  Match m = find_entries(db_, identity, key);
  const std::string log_key = identity.describe() + " / " + key.describe();
  std::lock_guard<std::mutex> lock(logged_->mutex);
  if (logged_->keys.insert(log_key).second) {
    if (m.entries.empty()) {
      log::info("tuning: {} on {}: no tuned entry (databases: {}); built-in {} defaults", key.describe(),
                identity.describe(), joined(loaded_), default_class_name(device.kind));
    } else {
      std::vector<std::string> buckets;
      for (const Entry* e : m.entries) buckets.push_back(fmt::format("{} ({})", e->tokens, e->kernel));
      log::info("tuning: {} on {}: tuned buckets {} from {}{}", key.describe(), identity.describe(), joined(buckets),
                m.entries.front()->origin, m.note.empty() ? "" : "; " + m.note);
    }
  }
  return m;
}

namespace {

std::mutex store_mutex;
std::shared_ptr<const TuningStore> store;

}  // namespace

std::shared_ptr<const TuningStore> tuning_store() {
  std::lock_guard<std::mutex> lock(store_mutex);
  if (!store) store = std::make_shared<const TuningStore>(TuningStore::from_environment());
  return store;
}

void reload_tuning_store() {
  auto fresh = std::make_shared<const TuningStore>(TuningStore::from_environment());
  std::lock_guard<std::mutex> lock(store_mutex);
  store = std::move(fresh);
}

}  // namespace fp4cl::tuning
