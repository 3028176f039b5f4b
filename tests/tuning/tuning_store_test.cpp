// Where the library's tuning database comes from: the shipped databases, FP4CL_TUNING_FILE or the
// user's file merged over them, FP4CL_TUNING_FILE=none, and files that cannot be used (skipped
// with a warning, never an error).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "tuning/embedded_tuning.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl::tuning {
namespace {

std::string database_text(const std::string& driver, std::int64_t tokens, const std::string& kernel) {
  Database db;
  DeviceIdentity d;
  d.platform = "P";
  d.vendor = "V";
  d.name = "Dev";
  d.driver = driver;
  d.compute_units = 2;
  d.kind = DeviceKind::cpu;
  Entry e;
  e.op = "linear";
  e.scheme = "nvfp4-w4a16";
  e.shape = {{"n", 64}, {"k", 256}};
  e.tokens = tokens;
  e.kernel = kernel;
  db.put(d, e);
  return to_json_text(db);
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(TuningStore, LaterSourcesReplaceEarlierEntries) {
  const TuningStore store({{"first", database_text("1.0", 1, "a")}, {"second", database_text("1.0", 1, "b")}});
  ASSERT_EQ(store.database().devices.size(), 1u);
  ASSERT_EQ(store.database().devices[0].entries.size(), 1u);
  EXPECT_EQ(store.database().devices[0].entries[0].kernel, "b");
  EXPECT_EQ(store.database().devices[0].entries[0].origin, "second");
  EXPECT_EQ(store.loaded(), (std::vector<std::string>{"first", "second"}));
}

TEST(TuningStore, CorruptSourceIsSkippedWithAWarning) {
  test::LogCapture log;
  const TuningStore store({{"good", database_text("1.0", 1, "a")}, {"broken.json", "{\"schema\": \"fp4cl-tuning\""}});
  EXPECT_EQ(store.loaded(), (std::vector<std::string>{"good"}));
  ASSERT_EQ(store.skipped().size(), 1u);
  EXPECT_NE(store.skipped()[0].find("broken.json"), std::string::npos) << store.skipped()[0];
  ASSERT_EQ(log.warnings().size(), 1u);
  EXPECT_NE(log.warnings()[0].find("broken.json"), std::string::npos) << log.warnings()[0];
  EXPECT_EQ(store.database().devices[0].entries[0].kernel, "a");  // what remains still serves
}

TEST(TuningStore, EnvironmentFileIsMergedOverTheShippedDatabases) {
  test::TempDir dir;
  const std::string path = dir.str() + "/mine.json";
  write(path, database_text("9.9", 4, "mine"));
  const test::ScopedEnv env("FP4CL_TUNING_FILE", path);
  const TuningStore store = TuningStore::from_environment();
  EXPECT_EQ(store.loaded().size(), embedded_databases().size() + 1);
  EXPECT_EQ(store.loaded().back(), path);
  bool found = false;
  for (const DeviceTuning& d : store.database().devices)
    for (const Entry& e : d.entries) found |= e.kernel == "mine" && e.origin == path;
  EXPECT_TRUE(found);
}

TEST(TuningStore, CorruptOrMissingEnvironmentFileWarnsAndIsSkipped) {
  test::TempDir dir;
  const std::string corrupt = dir.str() + "/corrupt.json";
  write(corrupt, "{ not json");
  for (const std::string& path : {corrupt, dir.str() + "/missing.json"}) {
    test::LogCapture log;
    const test::ScopedEnv env("FP4CL_TUNING_FILE", path);
    const TuningStore store = TuningStore::from_environment();
    EXPECT_EQ(store.loaded().size(), embedded_databases().size()) << path;  // the shipped ones only
    ASSERT_EQ(store.skipped().size(), 1u) << path;
    EXPECT_NE(store.skipped()[0].find(path), std::string::npos) << store.skipped()[0];
    ASSERT_FALSE(log.warnings().empty()) << path;
    EXPECT_NE(log.warnings()[0].find(path), std::string::npos) << log.warnings()[0];
  }
}

TEST(TuningStore, NoneMeansNoDatabase) {
  const test::ScopedEnv env("FP4CL_TUNING_FILE", std::string("none"));
  const TuningStore store = TuningStore::from_environment();
  EXPECT_TRUE(store.loaded().empty());
  EXPECT_TRUE(store.database().empty());
}

TEST(TuningStore, UserDatabaseFollowsXdgThenHome) {
  {
    const test::ScopedEnv xdg("XDG_CONFIG_HOME", std::string("/x/config"));
    EXPECT_EQ(TuningStore::user_database_path(), "/x/config/fp4cl/tuning.json");
  }
  const test::ScopedEnv xdg("XDG_CONFIG_HOME", std::nullopt);
  const test::ScopedEnv home("HOME", std::string("/home/u"));
  EXPECT_EQ(TuningStore::user_database_path(), "/home/u/.config/fp4cl/tuning.json");
}

TEST(TuningStore, UserDatabaseIsReadWhenNoFileIsNamed) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "fp4cl");
  const std::string path = (dir.path() / "fp4cl" / "tuning.json").string();
  write(path, database_text("1.0", 2, "user"));
  const test::ScopedEnv file("FP4CL_TUNING_FILE", std::nullopt);
  const test::ScopedEnv xdg("XDG_CONFIG_HOME", dir.str());
  const TuningStore store = TuningStore::from_environment();
  EXPECT_EQ(store.loaded().back(), path);
}

TEST(TuningStore, ShippedDatabasesAreValid) {
  for (const EmbeddedDatabase& e : embedded_databases())
    EXPECT_NO_THROW(parse_database(std::string(e.text), std::string(e.name))) << e.name;
}

// The shipped PoCL database (tuning/pocl-cpu.json) has entries for every shape of the benchmark
// issue's bar (qwen3-30b-a3b's MoE layer, linear 4096x4096 and 2048x768; NVFP4 W4A16 and W4A4;
// decode and prefill buckets), and a lookup through the store finds them both for the device it
// was tuned on and for another CPU of the same platform and vendor (the CI machine's CPU model
// may differ from the one it was tuned on).
TEST(TuningStore, ShippedPoclDatabaseCoversTheBar) {
  std::string text;
  for (const EmbeddedDatabase& e : embedded_databases())
    if (e.name == "tuning/pocl-cpu.json") text = std::string(e.text);
  ASSERT_FALSE(text.empty()) << "tuning/pocl-cpu.json is not shipped";
  const Database shipped = parse_database(text, "tuning/pocl-cpu.json");
  ASSERT_FALSE(shipped.devices.empty());
  // Both SIMD widths of the x86 CPUs CI has run on: AVX-512 (16 floats) and AVX2 (8).
  std::set<unsigned> widths;
  for (const DeviceTuning& d : shipped.devices) widths.insert(d.device.float_width);
  EXPECT_EQ(widths, (std::set<unsigned>{8, 16}));
  const TuningStore store({{"tuning/pocl-cpu.json (shipped)", text}});
  for (const DeviceTuning& d : shipped.devices) {
    EXPECT_EQ(d.device.platform, "Portable Computing Language");
    EXPECT_EQ(d.device.kind, DeviceKind::cpu);
    DeviceInfo tuned;
    tuned.platform_name = d.device.platform;
    tuned.vendor = d.device.vendor;
    tuned.name = d.device.name;
    tuned.driver_version = d.device.driver;
    tuned.compute_units = d.device.compute_units;
    tuned.kind = DeviceKind::cpu;
    EXPECT_GT(d.device.float_width, 0u) << "the shipped entries record the SIMD width they were tuned for";
    tuned.preferred_float_width = d.device.float_width;
    DeviceInfo other = tuned;
    other.name = "pthread-some-other-model-" + tuned.name;
    other.compute_units = tuned.compute_units * 2;
    // A CPU of a SIMD width no shipped device has (4 floats: SSE) takes the built-in defaults.
    DeviceInfo narrower = other;
    narrower.preferred_float_width = 4;
    EXPECT_TRUE(store.lookup(narrower, {"linear", "nvfp4-w4a16", {{"n", 4096}, {"k", 4096}}}).entries.empty());
    for (const char* scheme : {"nvfp4-w4a16", "nvfp4-w4a4"}) {
      const LookupKey moe{"moe", scheme, {{"hidden", 2048}, {"inter", 768}, {"experts", 128}, {"topk", 8}}};
      const LookupKey linear_big{"linear", scheme, {{"n", 4096}, {"k", 4096}}};
      const LookupKey linear_small{"linear", scheme, {{"n", 2048}, {"k", 768}}};
      for (const bool similar : {false, true}) {
        const DeviceInfo& info = similar ? other : tuned;
        const Match m = store.lookup(info, moe);
        ASSERT_FALSE(m.entries.empty()) << moe.describe() << " on " << info.name;
        EXPECT_EQ(m.entries.front()->origin, "tuning/pocl-cpu.json (shipped)");
        EXPECT_EQ(m.similar, similar);
        std::set<std::int64_t> buckets;
        for (const Entry* e : m.entries) buckets.insert(e->tokens);
        for (std::int64_t t : {1, 8, 512}) EXPECT_EQ(buckets.count(t), 1u) << moe.describe() << " bucket " << t;
        for (const LookupKey& key : {linear_big, linear_small}) {
          const Match l = store.lookup(info, key);
          ASSERT_FALSE(l.entries.empty()) << key.describe() << " on " << info.name;
          EXPECT_EQ(nearest_bucket(l.entries, 1).tokens, 1) << key.describe();
        }
      }
    }
  }
}

}  // namespace
}  // namespace fp4cl::tuning
