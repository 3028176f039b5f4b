// The tuning database the library uses, assembled once per process from:
//   1. the databases shipped in the repository (tuning/*.json, embedded at build time);
//   2. merged over them (an entry with the same device and key replaces the shipped one):
//      the file named by FP4CL_TUNING_FILE when it is set, else the user's database
//      $XDG_CONFIG_HOME/fp4cl/tuning.json (~/.config/fp4cl/tuning.json) when that file exists.
// FP4CL_TUNING_FILE=none uses no database at all: the built-in defaults only (tuning_defaults.hpp).
// A file that cannot be read or is not a valid database is skipped with a warning naming it and
// the problem; the layers then run with what remains (at worst the built-in defaults).
//
// Each lookup logs once per device and layer key (at info level) where its parameters come from:
// the tuned buckets and their file, or the built-in defaults of the device class.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "tuning/tuning_lookup.hpp"

namespace fp4cl::tuning {

// One database text and where it came from.
struct DatabaseSource {
  std::string name;  // a path, or "tuning/pocl-cpu.json" (shipped)
  std::string text;
};

class TuningStore {
 public:
  // Merges `sources` in order (later ones win); a source that fails to parse is skipped with a
  // warning. `origin` of each entry is the source it came from. `skipped`: sources already
  // found unusable (reported by skipped()).
  explicit TuningStore(const std::vector<DatabaseSource>& sources, std::vector<std::string> skipped = {});

  // The sources of FP4CL_TUNING_FILE / the user's file and the shipped databases, as above.
  static TuningStore from_environment();
  // The user's database path: $XDG_CONFIG_HOME/fp4cl/tuning.json, else $HOME/.config/fp4cl/
  // tuning.json ("" when neither variable is set).
  static std::string user_database_path();

  const Database& database() const { return db_; }
  // What was loaded, e.g. {"tuning/pocl-cpu.json (shipped)", "/home/u/.config/fp4cl/tuning.json"}.
  const std::vector<std::string>& loaded() const { return loaded_; }
  // What was skipped and why (each also logged as a warning).
  const std::vector<std::string>& skipped() const { return skipped_; }

  // The entries for a layer on a device (see tuning_lookup.hpp), logged once per device and key.
  Match lookup(const DeviceInfo& device, const LookupKey& key) const;

 private:
  struct Logged {
    std::mutex mutex;
    std::set<std::string> keys;
  };
  Database db_;
  std::vector<std::string> loaded_, skipped_;
  std::unique_ptr<Logged> logged_ = std::make_unique<Logged>();
};

// The process-wide store, from_environment() on first use.
std::shared_ptr<const TuningStore> tuning_store();
// Rebuilds the process-wide store from the environment (for tests and tools that change
// FP4CL_TUNING_FILE); layers created afterwards see the new database.
void reload_tuning_store();

}  // namespace fp4cl::tuning
