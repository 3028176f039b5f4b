// Model directories: a single model.safetensors or shards found through
// model.safetensors.index.json, and every way the index and shards can disagree.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint_safetensors/safetensors_test_util.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

using test::expect_error;
using test::TempDir;

std::vector<std::uint8_t> bytes_of(std::uint8_t first, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(first + i);
  return v;
}

// Writes a shard holding U8 tensors of 4 bytes, one per name.
void write_shard(const std::string& path, const std::vector<std::string>& names) {
  SafetensorsWriter w;
  std::uint8_t first = 0;
  for (const std::string& name : names) w.add(name, Dtype::u8, {4}, bytes_of(first += 4, 4));
  w.write(path);
}

// Two shards ("a", "b" in the first; "c" in the second) and an index saying so.
void write_sharded_model(const TempDir& dir) {
  write_shard(dir.file("model-00001-of-00002.safetensors"), {"a", "b"});
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"c"});
  test::write_file(dir.file("model.safetensors.index.json"),
                   R"({"metadata": {"total_size": 12}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                       "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
}

TEST(SafetensorsModel, SingleFileDirectory) {
  TempDir dir;
  write_shard(dir.file("model.safetensors"), {"x", "y"});
  for (const std::string& path : {dir.path().string(), dir.file("model.safetensors")}) {
    const SafetensorsModel m = SafetensorsModel::open(path);
    EXPECT_EQ(m.source(), dir.file("model.safetensors"));
    EXPECT_EQ(m.shards().size(), 1u);
    EXPECT_EQ(m.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(m.tensor("y").to_vector<std::uint8_t>(), bytes_of(8, 4));
  }
}

TEST(SafetensorsModel, ShardedDirectoryFindsTensorsAcrossShards) {
  TempDir dir;
  write_sharded_model(dir);
  for (const std::string& path : {dir.path().string(), dir.file("model.safetensors.index.json")}) {
    const SafetensorsModel m = SafetensorsModel::open(path);
    EXPECT_EQ(m.source(), dir.file("model.safetensors.index.json"));
    EXPECT_EQ(m.shards().size(), 2u);
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_TRUE(m.contains("c"));
    EXPECT_FALSE(m.contains("d"));
    EXPECT_FALSE(m.find("d").has_value());
    EXPECT_EQ(m.tensor("c").file(), dir.file("model-00002-of-00002.safetensors"));
    EXPECT_EQ(m.tensor("c").to_vector<std::uint8_t>(), bytes_of(4, 4));
    EXPECT_EQ(m.tensor("b").to_vector<std::uint8_t>(), bytes_of(8, 4));
    expect_error([&] { m.tensor("d"); },
                 {"safetensors model '" + m.source() + "' has no tensor 'd' (3 tensors in 2 files)"});
  }
}

TEST(SafetensorsModel, MissingModel) {
  TempDir dir;
  expect_error([&] { SafetensorsModel::open(dir.file("nothing")); },
               {"safetensors model '", "nothing' does not exist"});
  expect_error([&] { SafetensorsModel::open(dir.path().string()); },
               {"safetensors model directory '" + dir.path().string() +
                "' has neither model.safetensors.index.json nor model.safetensors"});
}

// Writes `index_text` as the index of a model whose shards are those of write_sharded_model.
void expect_index_error(const std::string& index_text, const std::vector<std::string>& parts) {
  TempDir dir;
  write_sharded_model(dir);
  const std::string index = dir.file("model.safetensors.index.json");
  test::write_file(index, index_text);
  std::vector<std::string> all{"safetensors index '" + index + "'"};
  for (const std::string& p : parts) all.push_back(p == "<dir>" ? dir.path().string() : p);
  expect_error([&] { SafetensorsModel::open(dir.path().string()); }, all);
}

TEST(SafetensorsModel, MalformedIndex) {
  expect_index_error(R"({"weight_map": {"a": )", {"malformed JSON"});
  expect_index_error("{\"weight_map\": {\"\xff\": 1}}", {"not valid UTF-8"});
  expect_index_error(R"(["weight_map"])", {"expected a JSON object with a \"weight_map\""});
  expect_index_error(R"({"metadata": {}})", {"has no \"weight_map\""});
  expect_index_error(R"({"weight_map": ["a"]})", {"\"weight_map\" has JSON type array, expected object"});
  expect_index_error(R"({"weight_map": {"a": 1}})",
                     {"weight_map entry for tensor 'a' has JSON type number, expected a shard file name"});
  expect_index_error(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "a": "model-00001-of-00002.safetensors"}})",
      {"duplicate key \"a\" in object \"/weight_map\""});
}

TEST(SafetensorsModel, IndexNamingAMissingShard) {
  expect_index_error(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                         "c": "model-00003-of-00003.safetensors"}})",
      {"weight_map puts tensor 'c' in shard 'model-00003-of-00003.safetensors', but '", "<dir>",
       "' does not exist"});
}

TEST(SafetensorsModel, ShardNamesMustStayInTheDirectory) {
  expect_index_error(
      R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})",
      {"weight_map names the shard \"../model-00001-of-00002.safetensors\" for tensor 'a'; expected a "
       "file name inside the model directory"});
  expect_index_error(R"({"weight_map": {"a": "/etc/passwd"}})", {"names the shard \"/etc/passwd\""});
  expect_index_error(R"({"weight_map": {"a": ""}})", {"names the shard \"\" for tensor 'a'"});
}

TEST(SafetensorsModel, IndexAndShardsDisagree) {
  // "c" is listed in the first shard, which does not hold it.
  expect_index_error(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                         "c": "model-00001-of-00002.safetensors"}})",
      {"weight_map puts tensor 'c' in shard '",
       "model-00001-of-00002.safetensors', which has no such tensor"});
  // The first shard holds "b", which the weight_map puts nowhere.
  expect_index_error(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})",
      {"shard '",
       "model-00001-of-00002.safetensors' holds tensor 'b', which the weight_map does not put there"});
}

TEST(SafetensorsModel, TensorInTwoShards) {
  TempDir dir;
  write_shard(dir.file("s1.safetensors"), {"a", "b"});
  write_shard(dir.file("s2.safetensors"), {"b", "c"});
  test::write_file(
      dir.file("model.safetensors.index.json"),
      R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}})");
  expect_error([&] { SafetensorsModel::open(dir.path().string()); },
               {"tensor 'b' is in two shards, '" + dir.file("s1.safetensors") + "' and '" +
                dir.file("s2.safetensors") + "'"});
}

TEST(SafetensorsModel, CorruptShardIsNamed) {
  TempDir dir;
  write_sharded_model(dir);
  test::write_file(dir.file("model-00002-of-00002.safetensors"), std::vector<std::uint8_t>{1, 2, 3});
  expect_error(
      [&] { SafetensorsModel::open(dir.path().string()); },
      {"safetensors file '" + dir.file("model-00002-of-00002.safetensors") + "'", "shorter than the 8-byte"});
}

TEST(SafetensorsModel, ShardsInSubdirectoriesAreAllowed) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "shards");
  write_shard(dir.file("shards/one.safetensors"), {"a"});
  test::write_file(dir.file("model.safetensors.index.json"),
                   R"({"weight_map": {"a": "shards/one.safetensors"}})");
  EXPECT_EQ(SafetensorsModel::open(dir.path().string()).tensor("a").to_vector<std::uint8_t>(),
            bytes_of(4, 4));
}

}  // namespace
}  // namespace fp4cl
