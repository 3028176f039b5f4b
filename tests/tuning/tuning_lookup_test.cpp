// Looking up tuned entries: the nearest token bucket on a logarithmic scale, and which device
// entries match (model and compute units; another driver only when the running one has none).
#include <gtest/gtest.h>

#include "tuning/tuning_lookup.hpp"

namespace fp4cl::tuning {
namespace {

DeviceIdentity device(const std::string& driver = "1.0", unsigned cus = 2) {
  DeviceIdentity d;
  d.platform = "P";
  d.vendor = "V";
  d.name = "Dev";
  d.driver = driver;
  d.compute_units = cus;
  d.kind = DeviceKind::cpu;
  return d;
}

Entry linear_entry(std::int64_t tokens, const std::string& kernel, std::int64_t n = 64) {
  Entry e;
  e.op = "linear";
  e.scheme = "nvfp4-w4a16";
  e.shape = {{"n", n}, {"k", 256}};
  e.tokens = tokens;
  e.kernel = kernel;
  return e;
}

const LookupKey kKey{"linear", "nvfp4-w4a16", {{"n", 64}, {"k", 256}}};

TEST(TuningLookup, NearestBucketOnALogScale) {
  Database db;
  for (std::int64_t t : {512, 1, 8, 64}) db.put(device(), linear_entry(t, "k" + std::to_string(t)));  // any order
  const Match m = find_entries(db, device(), kKey);
  ASSERT_EQ(m.entries.size(), 4u);
  EXPECT_EQ(m.entries.front()->tokens, 1);  // sorted
  const std::pair<std::int64_t, std::int64_t> expected[] = {
      {1, 1}, {2, 1}, {3, 8}, {4, 8}, {8, 8}, {22, 8}, {23, 64}, {181, 64}, {182, 512}, {100000, 512}};
  for (const auto& [tokens, bucket] : expected)
    EXPECT_EQ(nearest_bucket(m.entries, tokens).tokens, bucket) << tokens << " tokens";
}

// A bucket between two powers of two (a database may time 6 tokens beside 4 and 8) serves the
// counts nearest it on the same scale: 5 and 6 here (5² ≤ 4·6, 6² ≤ 6·8), 4 keeping 3 and 4.
TEST(TuningLookup, BucketsNeedNotBePowersOfTwo) {
  Database db;
  for (std::int64_t t : {8, 4, 6, 1}) db.put(device(), linear_entry(t, "k" + std::to_string(t)));
  const Match m = find_entries(db, device(), kKey);
  ASSERT_EQ(m.entries.size(), 4u);
  const std::pair<std::int64_t, std::int64_t> expected[] = {{2, 1}, {3, 4}, {4, 4}, {5, 6}, {6, 6}, {7, 8}, {11, 8}};
  for (const auto& [tokens, bucket] : expected)
    EXPECT_EQ(nearest_bucket(m.entries, tokens).tokens, bucket) << tokens << " tokens";
  // The database keeps such an entry through its text.
  EXPECT_EQ(parse_database(to_json_text(db), "db.json").devices[0].entries.size(), 4u);
}

TEST(TuningLookup, BucketBoundaries) {
  EXPECT_EQ(last_tokens_of_bucket(1, 2), 1);
  EXPECT_EQ(last_tokens_of_bucket(2, 4), 2);
  EXPECT_EQ(last_tokens_of_bucket(4, 8), 5);
  EXPECT_EQ(last_tokens_of_bucket(256, 512), 362);
  EXPECT_EQ(bucket_of(1), 1);
  EXPECT_EQ(bucket_of(3), 4);
  EXPECT_EQ(bucket_of(5), 4);
  EXPECT_EQ(bucket_of(6), 8);
  EXPECT_EQ(bucket_of(400), 512);
}

TEST(TuningLookup, MissingDeviceOrShapeFindsNothing) {
  Database db;
  db.put(device(), linear_entry(1, "gemv_rows"));
  for (const char* field : {"platform", "vendor", "kind"}) {
    DeviceIdentity other = device();
    other.name = "Other";
    if (std::string(field) == "platform") other.platform = "Q";
    if (std::string(field) == "vendor") other.vendor = "W";
    if (std::string(field) == "kind") other.kind = DeviceKind::gpu;
    const Match none = find_entries(db, other, kKey);
    EXPECT_TRUE(none.entries.empty()) << "another " << field;
    EXPECT_EQ(none.device, nullptr) << "another " << field;
  }
  DeviceIdentity unknown_kind = device();
  unknown_kind.kind = DeviceKind::other;
  Database other_db;
  other_db.put(unknown_kind, linear_entry(1, "gemv_rows"));
  unknown_kind.name = "Other";
  EXPECT_TRUE(find_entries(other_db, unknown_kind, kKey).entries.empty());  // no class to compare
  LookupKey shape = kKey;
  shape.shape["n"] = 128;
  EXPECT_TRUE(find_entries(db, device(), shape).entries.empty());
  LookupKey scheme = kKey;
  scheme.scheme = "nvfp4-w4a4";
  EXPECT_TRUE(find_entries(db, device(), scheme).entries.empty());
  EXPECT_EQ(find_entries(db, device(), kKey).entries.size(), 1u);
}

TEST(TuningLookup, AnotherDriverMatchesWithANoteOnlyWhenTheRunningOneHasNoEntry) {
  Database db;
  db.put(device("0.9"), linear_entry(1, "old"));
  Match m = find_entries(db, device("1.0"), kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0]->kernel, "old");
  EXPECT_NE(m.note.find("driver 0.9"), std::string::npos) << m.note;
  db.put(device("1.0"), linear_entry(1, "new"));
  m = find_entries(db, device("1.0"), kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0]->kernel, "new");
  EXPECT_TRUE(m.note.empty());
}

TEST(TuningLookup, ASimilarDeviceServesWhenTheModelHasNoEntry) {
  // Same platform, vendor and class, another model (the CI machine's CPU may not be the one the
  // shipped database was tuned on) of the same SIMD width: its entries, with a note naming it;
  // the same core count first.
  Database db;
  DeviceIdentity tuned16 = device("1.0", 16), tuned2 = device("1.0", 2);
  tuned16.name = "pthread-skylake-avx512-EPYC";
  tuned2.name = "pthread-znver4-EPYC";
  tuned16.float_width = tuned2.float_width = 16;
  db.put(tuned16, linear_entry(1, "sixteen"));
  db.put(tuned2, linear_entry(1, "two"));
  DeviceIdentity running = device("1.0", 2);
  running.name = "pthread-icelake-server-EPYC";
  running.float_width = 16;
  Match m = find_entries(db, running, kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0]->kernel, "two");
  EXPECT_TRUE(m.similar);
  EXPECT_NE(m.note.find("pthread-znver4-EPYC"), std::string::npos) << m.note;
  running.compute_units = 4;  // no model with 4 units: any similar one
  m = find_entries(db, running, kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_TRUE(m.similar);
  // The running model's own entries win over a similar device's, and carry no note.
  db.put(running, linear_entry(1, "own"));
  m = find_entries(db, running, kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0]->kernel, "own");
  EXPECT_FALSE(m.similar);
  EXPECT_TRUE(m.note.empty());
  // A similar device without the shape does not help.
  LookupKey shape = kKey;
  shape.shape["n"] = 128;
  EXPECT_TRUE(find_entries(db, running, shape).entries.empty());
}

TEST(TuningLookup, CpusOfAnotherOrUnknownSimdWidthAreNotSimilar) {
  // An AVX2 CPU (8 floats) does not take entries tuned on an AVX-512 one (16), nor entries whose
  // width was not recorded (databases written before the key); its own model's entries still apply.
  Database db;
  DeviceIdentity avx512 = device("1.0", 2), unknown = device("1.0", 2);
  avx512.name = "pthread-skylake-avx512-EPYC";
  avx512.float_width = 16;
  unknown.name = "pthread-znver4-EPYC";
  db.put(avx512, linear_entry(1, "avx512"));
  db.put(unknown, linear_entry(1, "unknown"));
  DeviceIdentity avx2 = device("1.0", 2);
  avx2.name = "pthread-haswell-EPYC";
  avx2.float_width = 8;
  EXPECT_TRUE(find_entries(db, avx2, kKey).entries.empty());
  avx2.float_width = 0;
  EXPECT_TRUE(find_entries(db, avx2, kKey).entries.empty());
  db.put(avx2, linear_entry(1, "own"));
  const Match m = find_entries(db, avx2, kKey);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0]->kernel, "own");
  // GPUs of one vendor stay similar whatever their widths (NVIDIA reports 1).
  Database gpus;
  DeviceIdentity h100 = device("1.0", 132), h200 = device("1.0", 132);
  h100.kind = h200.kind = DeviceKind::gpu;
  h100.name = "NVIDIA H100 80GB HBM3";
  h200.name = "NVIDIA H200";
  gpus.put(h100, linear_entry(1, "h100"));
  const Match g = find_entries(gpus, h200, kKey);
  ASSERT_EQ(g.entries.size(), 1u);
  EXPECT_TRUE(g.similar);
}

}  // namespace
}  // namespace fp4cl::tuning
