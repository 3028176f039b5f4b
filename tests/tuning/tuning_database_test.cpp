// The tuning database file: what parses, what is refused (with the file and key path named), the
// deterministic round trip, and how entries merge.
#include <gtest/gtest.h>

#include <string>

#include "fp4cl/error.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::tuning {
namespace {

const char* kValid = R"({
  "schema": "fp4cl-tuning", "version": 1,
  "devices": [{
    "device": {"platform": "P", "vendor": "V", "name": "Dev", "driver": "1.0", "compute_units": 2, "kind": "cpu"},
    "entries": [
      {"op": "linear", "scheme": "nvfp4-w4a16", "shape": {"n": 64, "k": 256}, "tokens": 1,
       "kernel": "gemv_rows", "params": {"GEMV_TOKENS": 4}, "measured": {"us": 10.5, "gbps": 1.25, "gflops": 3}},
      {"op": "moe", "scheme": "mxfp4-w4a4", "shape": {"hidden": 64, "inter": 32, "experts": 4, "topk": 2},
       "tokens": 8, "kernel": "grouped", "params": {"tile_m": 4}}
    ]
  }]
})";

// The error message of parsing `text` (or "(no error)").
std::string parse_error(const std::string& text) {
  return test::error_of([&] { parse_database(text, "db.json"); });
}

// kValid with `from` replaced by `to` (once).
std::string edited(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(TuningDatabase, ParsesAValidFile) {
  const Database db = parse_database(kValid, "db.json");
  ASSERT_EQ(db.devices.size(), 1u);
  const DeviceTuning& d = db.devices[0];
  EXPECT_EQ(d.device.name, "Dev");
  EXPECT_EQ(d.device.compute_units, 2u);
  EXPECT_EQ(d.device.kind, DeviceKind::cpu);
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[0].op, "linear");
  EXPECT_EQ(d.entries[0].shape, (Shape{{"n", 64}, {"k", 256}}));
  EXPECT_EQ(d.entries[0].params.at("GEMV_TOKENS"), 4);
  EXPECT_DOUBLE_EQ(d.entries[0].measured.gbps, 1.25);
  EXPECT_EQ(d.entries[1].tokens, 8);
  EXPECT_EQ(d.entries[1].kernel, "grouped");
}

TEST(TuningDatabase, RoundTripIsExactAndDeterministic) {
  const Database db = parse_database(kValid, "db.json");
  const std::string text = to_json_text(db);
  EXPECT_EQ(to_json_text(parse_database(text, "again.json")), text);
  test::TempDir dir;
  const std::string path = dir.str() + "/tuning.json";
  save_database(path, db);
  EXPECT_EQ(to_json_text(load_database(path)), text);
}

TEST(TuningDatabase, FloatWidthIsOptionalAndRoundTrips) {
  EXPECT_EQ(parse_database(kValid, "db.json").devices[0].device.float_width, 0u);  // not recorded
  const Database db = parse_database(edited("\"kind\": \"cpu\"", "\"kind\": \"cpu\", \"float_width\": 8"), "db.json");
  EXPECT_EQ(db.devices[0].device.float_width, 8u);
  EXPECT_EQ(parse_database(to_json_text(db), "again.json").devices[0].device.float_width, 8u);
}

TEST(TuningDatabase, RefusesWhatItCannotTrust) {
  const std::pair<std::string, std::string> cases[] = {
      {edited("\"fp4cl-tuning\"", "\"other\""), "db.json: schema must be \"fp4cl-tuning\""},
      {edited("\"version\": 1", "\"version\": 2"), "version is 2; this build of fp4cl reads version 1"},
      {edited("\"tokens\": 8", "\"tokens\": 0"), "devices[0].entries[1].tokens must be a token count from 1 to 2^30"},
      {edited("\"op\": \"linear\"", "\"op\": \"conv\""), "devices[0].entries[0].op must be \"linear\" or \"moe\""},
      {edited("\"nvfp4-w4a16\"", "\"int8\""), "devices[0].entries[0].scheme must be one of"},
      {edited("\"n\": 64, ", ""), "devices[0].entries[0].shape.n is missing"},
      {edited("\"k\": 256", "\"k\": 256, \"m\": 2"), "shape.m is not a dimension of a linear layer"},
      {edited("\"GEMV_TOKENS\": 4", "\"GEMV_TOKENS\": 4.5"), "params.GEMV_TOKENS must be an integer"},
      {edited("\"kernel\": \"grouped\"", "\"kernel\": \"grouped\", \"colour\": 1"), "colour is not a known key"},
      {edited("\"compute_units\": 2", "\"compute_units\": 0"), "compute_units must be a positive count"},
      {edited("\"kind\": \"cpu\"", "\"kind\": \"fpga\""), "device.kind must be one of"},
      {edited("\"kind\": \"cpu\"", "\"kind\": \"cpu\", \"float_width\": 0"), "float_width must be a vector width"},
      {edited("\"kind\": \"cpu\"", "\"kind\": \"cpu\", \"float_width\": 16"), "(no error)"},  // optional
      {edited("\"tokens\": 8", "\"tokens\": 1"), "(no error)"},  // different op: not a duplicate
      {edited("\"op\": \"moe\", \"scheme\": \"mxfp4-w4a4\", \"shape\": {\"hidden\": 64, \"inter\": 32, \"experts\": "
              "4, \"topk\": 2},\n       \"tokens\": 8",
              "\"op\": \"linear\", \"scheme\": \"nvfp4-w4a16\", \"shape\": {\"n\": 64, \"k\": 256}, \"tokens\": 1"),
       "repeats the linear nvfp4-w4a16 entry"},
      {"{\"schema\": \"fp4cl-tuning\", \"version\": 1, \"devices\": [", "db.json"},  // truncated
      {"{\"schema\": \"fp4cl-tuning\", \"schema\": \"fp4cl-tuning\", \"version\": 1, \"devices\": []}", "duplicate"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string e = parse_error(text);
    EXPECT_NE(e.find(expected), std::string::npos) << "expected '" << expected << "' in: " << e;
  }
}

TEST(TuningDatabase, MissingFileIsAnErrorNamingIt) {
  try {
    load_database("/nonexistent/tuning.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tuning.json"), std::string::npos) << e.what();
  }
}

TEST(TuningDatabase, PutReplacesTheSameKeyAndMergeAddsDevices) {
  Database db = parse_database(kValid, "db.json");
  Entry e = db.devices[0].entries[0];
  e.params = {{"GEMV_TOKENS", 8}};
  db.put(db.devices[0].device, e);
  ASSERT_EQ(db.devices[0].entries.size(), 2u);
  EXPECT_EQ(db.devices[0].entries[0].params.at("GEMV_TOKENS"), 8);
  e.tokens = 2;
  db.put(db.devices[0].device, e);
  EXPECT_EQ(db.devices[0].entries.size(), 3u);

  Database other;
  DeviceIdentity d = db.devices[0].device;
  d.driver = "2.0";  // another driver is another device entry
  other.put(d, e);
  db.merge(other);
  EXPECT_EQ(db.devices.size(), 2u);
  EXPECT_FALSE(db.empty());
  EXPECT_TRUE(Database{}.empty());
}

TEST(TuningDatabase, SchemeKeys) {
  for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4})
    for (Activations a : {Activations::bf16, Activations::fp4_dynamic}) {
      QuantScheme s;
      ASSERT_TRUE(parse_scheme_key(scheme_key({f, a}), s));
      EXPECT_EQ(s, (QuantScheme{f, a}));
    }
  EXPECT_EQ(scheme_key({WeightFormat::nvfp4, Activations::bf16}), "nvfp4-w4a16");
  QuantScheme s;
  EXPECT_FALSE(parse_scheme_key("nvfp4", s));
}

}  // namespace
}  // namespace fp4cl::tuning
