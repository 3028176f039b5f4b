// The writer: the format's layout and padding, its input checks, atomic replacement, and
// sharded output with an index.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint_safetensors/safetensors_test_util.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

using test::expect_error;
using test::TempDir;

std::uint64_t header_length(const std::vector<std::uint8_t>& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
  return n;
}

std::string header_text(const std::vector<std::uint8_t>& file) {
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(header_length(file)));
}

TEST(SafetensorsWriter, EmptyFileIsAPaddedEmptyObject) {
  const std::vector<std::uint8_t> file = SafetensorsWriter().serialize();
  EXPECT_EQ(file.size(), 16u);
  EXPECT_EQ(header_length(file), 8u);
  EXPECT_EQ(header_text(file), "{}      ");
}

TEST(SafetensorsWriter, HeaderIsPaddedWithSpacesToAMultipleOf8) {
  // Names of every length 1..16 move the header's end through all residues modulo 8.
  for (std::size_t len = 1; len <= 16; ++len) {
    SafetensorsWriter w;
    w.add(std::string(len, 'n'), Dtype::u8, {3}, std::vector<std::uint8_t>{1, 2, 3});
    const std::vector<std::uint8_t> file = w.serialize();
    const std::string header = header_text(file);
    ASSERT_EQ(header.size() % 8, 0u);
    const std::string json =
        "{\"" + std::string(len, 'n') + "\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    EXPECT_EQ(header, json + std::string(header.size() - json.size(), ' '));
    EXPECT_LT(header.size() - json.size(), 8u);
    EXPECT_EQ(file.size(), 8 + header.size() + 3);
  }
}

TEST(SafetensorsWriter, OrdersByDtypeSizeThenNameSoEveryTensorIsAligned) {
  SafetensorsWriter w;
  w.add("b_u8", Dtype::u8, {3}, std::vector<std::uint8_t>(3, 1));
  w.add("a_bf16", Dtype::bf16, {1}, std::vector<std::uint8_t>(2, 2));
  w.add("z_f64", Dtype::f64, {1}, std::vector<std::uint8_t>(8, 3));
  w.add("a_f32", Dtype::f32, {1}, std::vector<std::uint8_t>(4, 4));
  w.add("b_f32", Dtype::f32, {}, std::vector<std::uint8_t>(4, 5));
  w.add("a_bool", Dtype::boolean, {1}, std::vector<std::uint8_t>(1, 1));
  w.add("c_i64", Dtype::i64, {1}, std::vector<std::uint8_t>(8, 6));
  w.set_metadata("format", "pt");
  const SafetensorsFile f = SafetensorsFile::from_bytes(w.serialize(), "ordered");
  std::vector<std::string> order;
  for (const TensorInfo& t : f.tensors()) {
    order.push_back(t.name);
    EXPECT_EQ((f.data_offset() + t.begin) % static_cast<std::uint64_t>(std::max(1, dtype_bits(t.dtype) / 8)),
              0u)
        << t.name;
  }
  // The official enum order: ... BOOL < U8 < BF16 < F32 < F64 < I64; descending, then by name.
  EXPECT_EQ(order,
            (std::vector<std::string>{"c_i64", "z_f64", "a_f32", "b_f32", "a_bf16", "b_u8", "a_bool"}));
  // __metadata__ comes first, then the tensors in file order, fields as the official writer puts them.
  const std::string header = header_text(w.serialize());
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"c_i64\":{\"dtype\":\"I64\",\"shape\":[1],"
                         "\"data_offsets\":[0,8]},",
                         0),
            0u)
      << header;
}

TEST(SafetensorsWriter, RoundTripsThroughFileAndMemory) {
  SafetensorsWriter w;
  w.add("w", {2, 2}, std::vector<float>{1, 2, 3, 4});
  w.add("\xce\xb1.scale", Dtype::f8_e4m3, {2}, std::vector<std::uint8_t>{0x38, 0x7E});
  w.add("empty", Dtype::f32, {0, 5}, std::vector<std::uint8_t>{});
  w.set_metadata("k", "v \xe2\x9c\x93");
  TempDir dir;
  const std::string path = dir.file("rt.safetensors");
  w.write(path);
  EXPECT_EQ(test::read_file(path), w.serialize());
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.tensor("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(f.tensor("\xce\xb1.scale").to_vector<std::uint8_t>(Dtype::f8_e4m3),
            (std::vector<std::uint8_t>{0x38, 0x7E}));
  EXPECT_EQ(f.tensor("empty").shape(), (std::vector<std::int64_t>{0, 5}));
  EXPECT_EQ(f.metadata().at("k"), "v \xe2\x9c\x93");
}

TEST(SafetensorsWriter, CopiesViewsWithoutCopyingTheirBytes) {
  SafetensorsWriter original;
  original.add("a", {3}, std::vector<std::int32_t>{7, -8, 9});
  original.add("b", Dtype::bf16, {2}, std::vector<std::uint8_t>{1, 2, 3, 4});
  original.set_metadata("format", "pt");
  SafetensorsWriter copy;
  {
    const SafetensorsFile f = SafetensorsFile::from_bytes(original.serialize(), "original");
    for (const TensorInfo& t : f.tensors()) copy.add(f.tensor(t.name));
    copy.add("renamed", f.tensor("a"));
    copy.set_metadata("format", "pt");
  }  // the views keep the file's bytes alive
  const SafetensorsFile c = SafetensorsFile::from_bytes(copy.serialize(), "copy");
  EXPECT_EQ(c.tensor("a").to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, -8, 9}));
  EXPECT_EQ(c.tensor("renamed").to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, -8, 9}));
  EXPECT_EQ(c.tensor("b").to_vector<std::uint16_t>(Dtype::bf16),
            (std::vector<std::uint16_t>{0x0201, 0x0403}));
}

TEST(SafetensorsWriter, RefusesBadTensors) {
  SafetensorsWriter w;
  w.add("a", Dtype::u8, {1}, std::vector<std::uint8_t>{1});
  expect_error([&] { w.add("a", Dtype::u8, {1}, std::vector<std::uint8_t>{1}); }, {"tensor 'a' added twice"});
  expect_error([&] { w.add("__metadata__", Dtype::u8, {1}, std::vector<std::uint8_t>{1}); },
               {"\"__metadata__\" is reserved"});
  expect_error([&] { w.add("bad\xff", Dtype::u8, {1}, std::vector<std::uint8_t>{1}); },
               {"a tensor name is not valid UTF-8 (byte 3)"});
  expect_error(
      [&] {
        w.add("neg", Dtype::u8, {2, -1}, std::vector<std::uint8_t>{});
      },
      {"tensor 'neg' has the negative dimension -1 in shape [2, -1]"});
  expect_error(
      [&] {
        w.add("size", Dtype::f32, {2, 3}, std::vector<std::uint8_t>(20));
      },
      {"tensor 'size': shape [2, 3] of F32 needs 24 bytes, but 20 were given"});
  expect_error([&] { w.add("nibbles", Dtype::f4, {3}, std::vector<std::uint8_t>(2)); },
               {"tensor 'nibbles': shape [3] of F4 does not fill whole bytes"});
  expect_error(
      [&] {
        w.add("huge", Dtype::u8, {1LL << 62, 8}, std::vector<std::uint8_t>{});
      },
      {"tensor 'huge' of shape [4611686018427387904, 8] holds more than 2^64 bits"});
  expect_error([&] { w.set_metadata("k", "\xc3"); }, {"a metadata value is not valid UTF-8 (byte 0)"});
  EXPECT_EQ(w.size(), 1u);
}

TEST(SafetensorsWriter, WritesAtomically) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  test::write_file(path, std::string("old contents"));
  SafetensorsWriter w;
  w.add("x", {1}, std::vector<float>{5.0f});
  w.write(path);
  EXPECT_EQ(SafetensorsFile::open(path).tensor("x").scalar_f32(), 5.0f);
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, (std::vector<std::string>{"m.safetensors"}));  // no temporary left

  // Into a missing directory: an error naming the path, nothing created.
  expect_error([&] { w.write(dir.file("missing/m.safetensors")); },
               {"cannot write '" + dir.file("missing/m.safetensors") + "'", "No such file or directory"});
  // Over a directory: the rename fails, the temporary is removed, the directory stays.
  std::filesystem::create_directories(dir.path() / "taken");
  expect_error([&] { w.write(dir.file("taken")); },
               {"cannot write '" + dir.file("taken") + "': rename failed"});
  entries.clear();
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"m.safetensors", "taken"}));
}

TEST(SafetensorsWriter, WritesShardsAndAnIndex) {
  SafetensorsWriter w;
  for (const char* name : {"a", "b", "c", "d"})
    w.add(name, Dtype::u8, {16}, std::vector<std::uint8_t>(16, static_cast<std::uint8_t>(name[0])));
  w.add("big", Dtype::u8, {100}, std::vector<std::uint8_t>(100, 9));
  w.set_metadata("format", "pt");
  TempDir dir;
  const std::string out = dir.file("out");
  // Name order a, b, big, c, d with at most 40 bytes: [a, b] [big] [c, d].
  const std::vector<std::string> shards = w.write_sharded(out, 40);
  ASSERT_EQ(shards,
            (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors"}));
  EXPECT_EQ(SafetensorsFile::open(out + "/" + shards[0]).tensors().size(), 2u);
  EXPECT_EQ(SafetensorsFile::open(out + "/" + shards[1]).tensors().size(), 1u);
  EXPECT_EQ(SafetensorsFile::open(out + "/" + shards[2]).metadata().at("format"), "pt");

  const auto index = nlohmann::json::parse(test::read_file(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 164);
  EXPECT_EQ(index["weight_map"]["big"], shards[1]);
  EXPECT_EQ(index["weight_map"]["d"], shards[2]);
  EXPECT_EQ(index["weight_map"].size(), 5u);

  const SafetensorsModel m = SafetensorsModel::open(out);
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "big", "c", "d"}));
  EXPECT_EQ(m.tensor("c").to_vector<std::uint8_t>(), std::vector<std::uint8_t>(16, 'c'));
  EXPECT_EQ(m.tensor("big").file(), out + "/" + shards[1]);

  expect_error([&] { w.write_sharded(out, 0); }, {"max_shard_bytes must be positive"});
  const std::vector<std::string> one = SafetensorsWriter().write_sharded(dir.file("empty"), 10);
  EXPECT_EQ(one, (std::vector<std::string>{"model-00001-of-00001.safetensors"}));
  EXPECT_EQ(SafetensorsModel::open(dir.file("empty")).size(), 0u);
}

}  // namespace
}  // namespace fp4cl
