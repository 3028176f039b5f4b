// Every way a safetensors header can be invalid gives an fp4cl::Error that names the file, the
// tensor where one is concerned, and what was expected.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "checkpoint_safetensors/safetensors_test_util.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

using test::counting_bytes;
using test::expect_error;
using test::file_bytes;

const char* kLabel = "mem.safetensors";
const char* kFile = "safetensors file 'mem.safetensors'";

SafetensorsFile load(const std::string& header, std::size_t data_bytes = 0) {
  return SafetensorsFile::from_bytes(file_bytes(header, counting_bytes(data_bytes)), kLabel);
}

void expect_header_error(const std::string& header, std::size_t data_bytes, std::vector<std::string> parts) {
  parts.insert(parts.begin(), kFile);
  expect_error([&] { load(header, data_bytes); }, parts);
}

// A one-tensor header whose entry for "a" is `entry`.
std::string one(const std::string& entry) { return "{\"a\":" + entry + "}"; }

TEST(SafetensorsHeader, FileShorterThanTheLengthField) {
  for (std::size_t n = 0; n < 8; ++n) {
    expect_error([&] { SafetensorsFile::from_bytes(std::vector<std::uint8_t>(n, 0), kLabel); },
                 {kFile, std::to_string(n) + " bytes long, shorter than the 8-byte header length"});
  }
  test::TempDir dir;
  for (std::size_t n : {0, 5}) {
    const std::string path = dir.file("short" + std::to_string(n) + ".safetensors");
    test::write_file(path, std::vector<std::uint8_t>(n, 1));
    expect_error([&] { SafetensorsFile::open(path); }, {path, "shorter than the 8-byte header length"});
  }
}

TEST(SafetensorsHeader, HeaderLengthBeyondTheFile) {
  std::vector<std::uint8_t> bytes = file_bytes("{}      ");
  bytes[0] = 100;  // claims 100 header bytes; the file has 8
  expect_error([&] { SafetensorsFile::from_bytes(bytes, kLabel); },
               {kFile, "header length 100 runs past the end of the file (16 bytes)"});
  std::vector<std::uint8_t> huge(16, 0xFF);  // length 2^64 - 1: no wrap-around in the bounds check
  expect_error([&] { SafetensorsFile::from_bytes(huge, kLabel); },
               {kFile, "header length 18446744073709551615 runs past the end of the file"});
}

TEST(SafetensorsHeader, HeaderLengthAboveTheLimit) {
  // A sparse file just big enough: the length is refused before any of it is read.
  test::TempDir dir;
  const std::string path = dir.file("big.safetensors");
  std::vector<std::uint8_t> length(8, 0);
  const std::uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) length[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  test::write_file(path, length);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(8 + n)), 0);
  expect_error([&] { SafetensorsFile::open(path); },
               {path, "header length 100000001 exceeds the limit of 100000000 bytes"});
}

TEST(SafetensorsHeader, HeaderNotUtf8) {
  expect_header_error("{\"a\xff\":1}", 0, {"header: not valid UTF-8 (byte 3)"});
  expect_header_error("{\"\xc0\x80\":1}", 0, {"not valid UTF-8 (byte 2)"});          // overlong NUL
  expect_header_error("{\"\xed\xa0\x80\":1}", 0, {"not valid UTF-8 (byte 2)"});      // surrogate
  expect_header_error("{\"\xf4\x90\x80\x80\":1}", 0, {"not valid UTF-8 (byte 2)"});  // above U+10FFFF
  expect_header_error("{\"\xe2\x82", 0, {"not valid UTF-8 (byte 2)"});               // cut short
}

TEST(SafetensorsHeader, MalformedJson) {
  expect_header_error("{\"a\":", 0, {"header: malformed JSON", "parse error"});
  expect_header_error("", 0, {"malformed JSON"});
  // NUL padding is not JSON whitespace, and nothing may hide after a NUL.
  expect_header_error(std::string("{}\0\0\0\0\0\0", 8), 0, {"malformed JSON: a NUL byte at byte 2"});
  expect_header_error(std::string("{}\0{\"a\":1}", 10), 0, {"malformed JSON: a NUL byte at byte 2"});
  expect_header_error("{} x", 0, {"malformed JSON"});
}

TEST(SafetensorsHeader, HeaderNotAnObject) {
  expect_header_error("[]", 0, {"header is an array, expected a JSON object"});
  expect_header_error("7", 0, {"header is a number, expected a JSON object"});
  expect_header_error("null", 0, {"header is a null, expected a JSON object"});
}

TEST(SafetensorsHeader, NestingTooDeep) {
  expect_header_error(one(std::string(100, '[') + std::string(100, ']')), 0,
                      {"nested deeper than 64 levels"});
}

TEST(SafetensorsHeader, DuplicateTensorName) {
  const std::string entry = "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  expect_header_error("{\"a\":" + entry + ",\"a\":" + entry + "}", 1,
                      {"duplicate key \"a\" in the top-level object"});
}

TEST(SafetensorsHeader, DuplicateFieldOrMetadataKey) {
  expect_header_error(one("{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
                      {"duplicate key \"dtype\" in object \"/a\""});
  expect_header_error("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
                      {"duplicate key \"k\" in object \"/__metadata__\""});
}

TEST(SafetensorsHeader, TensorEntryMissingAField) {
  expect_header_error(one("{\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
                      {"tensor 'a': entry has no \"dtype\""});
  expect_header_error(one("{\"dtype\":\"U8\",\"data_offsets\":[0,1]}"), 1,
                      {"tensor 'a': entry has no \"shape\""});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1]}"), 1,
                      {"tensor 'a': entry has no \"data_offsets\""});
}

TEST(SafetensorsHeader, TensorEntryWithWrongTypes) {
  expect_header_error(one("[1]"), 1, {"tensor 'a': entry is an array, expected an object"});
  expect_header_error(one("{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
                      {"tensor 'a': dtype is a number, expected a string"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}"), 1,
                      {"tensor 'a': shape is a string, expected an array"});
  expect_header_error(
      one("{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}"), 1,
      {"tensor 'a': shape [\"1\"] has a string at position 0, expected a non-negative integer"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}"), 1,
                      {"shape [1.5] has a non-integer or out-of-range number at position 0"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"b\":0}}"), 1,
                      {"tensor 'a': data_offsets is {\"b\":0}, expected an array [begin, end]"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}"), 1,
                      {"data_offsets is [0,1,2], expected an array [begin, end]"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,1]}"), 1,
                      {"tensor 'a': data_offsets[0] is a negative number, expected a non-negative integer"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}"), 1,
                      {"data_offsets[1] is a non-integer or out-of-range number"});
}

TEST(SafetensorsHeader, UnknownDtype) {
  // torch.float8_e4m3fn is stored as "F8_E4M3"; "F8_E4M3FN" is not a safetensors dtype.
  expect_header_error(one("{\"dtype\":\"F8_E4M3FN\",\"shape\":[1],\"data_offsets\":[0,1]}"), 1,
                      {"tensor 'a': unknown dtype \"F8_E4M3FN\" (known: BOOL"});
  expect_header_error(one("{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4,
                      {"unknown dtype \"f32\""});
}

TEST(SafetensorsHeader, NegativeOrHugeDimension) {
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[2,-3],\"data_offsets\":[0,0]}"), 0,
                      {"tensor 'a': shape [2,-3] has the negative dimension -3 at position 1"});
  expect_header_error(
      one("{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,0]}"), 0,
      {"tensor 'a': shape [9223372036854775808] has a dimension above 2^63 - 1 at position 0"});
  // Beyond 64 bits nlohmann reads a float: refused as such.
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]}"), 0,
                      {"has a non-integer or out-of-range number at position 0"});
}

TEST(SafetensorsHeader, ElementCountOverflow) {
  // 2^32 × 2^32 overflows the element count; 2^61 F64 elements overflow the bit count.
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}"), 0,
                      {"tensor 'a': shape [4294967296, 4294967296] of U8 holds more than 2^64 bits"});
  expect_header_error(one("{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}"), 0,
                      {"shape [2305843009213693952] of F64 holds more than 2^64 bits"});
  // A product that wraps to exactly the stated length must not pass: 2^62 × 4 U8 = 2^64 ≡ 0 bytes.
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}"), 0,
                      {"holds more than 2^64 bits"});
  // A zero dimension makes the count 0 whatever the others are.
  EXPECT_NO_THROW(
      load(one("{\"dtype\":\"U8\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]}"), 0));
}

TEST(SafetensorsHeader, ShapeAndByteLengthDisagree) {
  expect_header_error(one("{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}"), 20,
                      {"tensor 'a': shape [2, 3] of F32 needs 24 bytes, but data_offsets [0, 20] hold 20"});
  expect_header_error(one("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}"), 0,
                      {"shape [] of F32 needs 4 bytes"});
  expect_header_error(one("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}"), 2,
                      {"tensor 'a': shape [3] of F4 (4 bits each) does not fill whole bytes"});
}

TEST(SafetensorsHeader, OffsetsOutOfOrderOrRange) {
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}"), 8,
                      {"tensor 'a': data_offsets [8, 4] end before they begin"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[100],\"data_offsets\":[0,100]}"), 8,
                      {"tensor 'a': data_offsets [0, 100] run past the end of the data section (8 bytes)"});
  expect_header_error(
      one("{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}"), 0,
      {"run past the end of the data section (0 bytes)"});
}

TEST(SafetensorsHeader, OverlappingTensors) {
  expect_header_error(
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
      12, {"tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"});
  // The same range twice is an overlap too.
  expect_header_error(
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
      4, {"data_offsets [0, 4] overlap tensor"});
}

TEST(SafetensorsHeader, GapsAndTrailingBytes) {
  expect_header_error(
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
      12, {"bytes [4, 8) of the data section belong to no tensor (before tensor 'b')"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}"), 8,
                      {"bytes [0, 4) of the data section belong to no tensor (before tensor 'a')"});
  expect_header_error(one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}"), 6,
                      {"the data section has 6 bytes but its tensors cover only the first 4"});
  expect_header_error("{}", 3, {"the data section has 3 bytes but its tensors cover only the first 0"});
}

TEST(SafetensorsHeader, MetadataMustBeAStringMap) {
  expect_header_error("{\"__metadata__\":[\"x\"]}", 0,
                      {"__metadata__ is an array, expected an object of strings"});
  expect_header_error("{\"__metadata__\":{\"format\":\"pt\",\"step\":3}}", 0,
                      {"__metadata__ entry \"step\" is a number, expected a string"});
  const SafetensorsFile null_metadata = load("{\"__metadata__\":null}");
  EXPECT_TRUE(null_metadata.metadata().empty());
}

TEST(SafetensorsHeader, AcceptsWhatTheFormatAllows) {
  // Leading and trailing whitespace, fields it does not know, "-0", zero-size tensors sharing an
  // offset, and metadata.
  const SafetensorsFile f = load(
      "  {\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
      "\"y\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,-0]},"
      "\"w\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4],\"note\":{\"x\":[1]}},"
      "\"v\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[4,6]},"
      "\"\xce\xb1\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[6,9]}}   ",
      9);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensor("w").shape(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(f.tensor("z").num_elements(), 0u);
  EXPECT_EQ(f.tensor("\xce\xb1").dtype(), Dtype::f6_e2m3);
  EXPECT_EQ(f.tensor("v").bytes().size(), 2u);
  EXPECT_EQ(f.tensor("v").bytes()[0], 4);
}

TEST(SafetensorsHeader, EmptyFileListIsValid) {
  const SafetensorsFile f = load("{}      ");
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.data_offset(), 16u);
}

TEST(SafetensorsHeader, UnreadablePaths) {
  test::TempDir dir;
  expect_error([&] { SafetensorsFile::open(dir.file("absent.safetensors")); },
               {"cannot open '" + dir.file("absent.safetensors") + "'", "No such file"});
  expect_error([&] { SafetensorsFile::open(dir.path().string()); }, {"is not a regular file"});
}

}  // namespace
}  // namespace fp4cl
