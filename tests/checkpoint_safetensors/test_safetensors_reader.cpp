// Reading valid files: zero-copy views, metadata, lookup, and the typed accessors' checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint_safetensors/safetensors_test_util.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

using test::expect_error;
using test::file_bytes;

std::vector<std::uint8_t> le_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  return std::vector<std::uint8_t>(b, b + n);
}

// A file with tensors of several dtypes, written by SafetensorsWriter.
struct Sample {
  std::vector<float> w{1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};    // F32 [2, 3]
  std::vector<std::uint16_t> bf{0x3F80, 0xC000, 0x7F80, 0x0001};  // BF16 [4]
  std::vector<std::uint8_t> scale{0x30, 0x38, 0x7E};              // F8_E4M3 [3]
  std::vector<std::uint8_t> packed{0xD7, 0x01, 0xFF, 0x80};       // U8 [2, 2]
  std::vector<std::int64_t> ids{-1, 1LL << 40};                   // I64 [2]
  float gs = 0.125f;                                              // F32 []

  SafetensorsWriter writer() const {
    SafetensorsWriter out;
    out.add("layer.weight_f32", {2, 3}, w);
    out.add("layer.bf16", Dtype::bf16, {4}, bf.data(), bf.size() * 2);
    out.add("layer.weight_scale", Dtype::f8_e4m3, {3}, scale);
    out.add("layer.weight_packed", {2, 2}, packed);
    out.add("ids", {2}, ids);
    out.add("layer.weight_scale_2", Dtype::f32, {}, &gs, sizeof gs);
    out.set_metadata("format", "pt");
    out.set_metadata("producer", "fp4cl-test");
    return out;
  }
};

TEST(SafetensorsReader, ReadsWhatTheWriterWrote) {
  const Sample s;
  test::TempDir dir;
  const std::string path = dir.file("sample.safetensors");
  s.writer().write(path);
  const SafetensorsFile f = SafetensorsFile::open(path);

  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"producer", "fp4cl-test"}}));
  EXPECT_EQ(f.data_offset() % 8, 0u);
  std::uint64_t covered = 0;
  for (const TensorInfo& t : f.tensors()) {  // data-offset order, tiling the data section
    EXPECT_EQ(t.begin, covered) << t.name;
    covered = t.end;
  }
  EXPECT_EQ(f.data_offset() + covered, f.file_size());

  const TensorView w = f.tensor("layer.weight_f32");
  EXPECT_EQ(w.name(), "layer.weight_f32");
  EXPECT_EQ(w.file(), path);
  EXPECT_EQ(w.dtype(), Dtype::f32);
  EXPECT_EQ(w.shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(w.num_elements(), 6u);
  const Span<const float> values = w.as<float>();
  EXPECT_EQ(std::vector<float>(values.begin(), values.end()), s.w);
  EXPECT_EQ(w.to_vector<float>(), s.w);

  EXPECT_EQ(f.tensor("layer.bf16").to_vector<std::uint16_t>(Dtype::bf16), s.bf);
  EXPECT_EQ(f.tensor("layer.weight_scale").to_vector<std::uint8_t>(Dtype::f8_e4m3), s.scale);
  EXPECT_EQ(f.tensor("layer.weight_packed").to_vector<std::uint8_t>(), s.packed);
  EXPECT_EQ(f.tensor("ids").to_vector<std::int64_t>(), s.ids);
  EXPECT_EQ(f.tensor("layer.weight_scale_2").scalar_f32(), 0.125f);
  EXPECT_EQ(le_bytes(f.tensor("ids").bytes().data(), 16), le_bytes(s.ids.data(), 16));
}

TEST(SafetensorsReader, ViewsPointIntoTheFileAndKeepItAlive) {
  const Sample s;
  const SafetensorsFile f = SafetensorsFile::from_bytes(s.writer().serialize(), "sample");
  const TensorView a = f.tensor("layer.weight_f32");
  const TensorView b = f.tensor("layer.weight_packed");
  // In place: the distance between two views' bytes is the distance between their offsets.
  EXPECT_EQ(b.bytes().data() - a.bytes().data(),
            static_cast<std::ptrdiff_t>(b.info().begin) - static_cast<std::ptrdiff_t>(a.info().begin));
  EXPECT_EQ(SafetensorsFile(f).tensor("ids").bytes().data(), f.tensor("ids").bytes().data());

  std::optional<TensorView> survivor;
  {
    test::TempDir dir;
    s.writer().write(dir.file("x.safetensors"));
    survivor = SafetensorsFile::open(dir.file("x.safetensors")).tensor("layer.weight_f32");
  }  // the file object and even the file on disk are gone; the mapping is not
  EXPECT_EQ(survivor->to_vector<float>(), s.w);
}

TEST(SafetensorsReader, LookupByName) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(Sample().writer().serialize(), "sample.bin");
  EXPECT_TRUE(f.contains("ids"));
  EXPECT_FALSE(f.contains("id"));
  EXPECT_FALSE(f.find("layer").has_value());
  ASSERT_TRUE(f.find("ids").has_value());
  EXPECT_EQ(f.find("ids")->name(), "ids");
  expect_error([&] { f.tensor("layer.weight"); },
               {"safetensors file 'sample.bin' has no tensor 'layer.weight' (6 tensors)"});
}

TEST(SafetensorsReader, TypedAccessorsCheckTheDtype) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(Sample().writer().serialize(), "sample.bin");
  expect_error([&] { f.tensor("layer.bf16").as<float>(); },
               {"tensor 'layer.bf16' in 'sample.bin': expected dtype F32, but it is BF16 [4]"});
  expect_error([&] { f.tensor("layer.weight_scale").to_vector<std::uint8_t>(); },
               {"tensor 'layer.weight_scale' in 'sample.bin': expected dtype U8, but it is F8_E4M3 [3]"});
  expect_error([&] { f.tensor("layer.bf16").as<std::uint32_t>(Dtype::bf16); },
               {"tensor 'layer.bf16' in 'sample.bin': BF16 elements have 16 bits, not the 32 bits"});
  expect_error([&] { f.tensor("ids").as<std::uint64_t>(); }, {"expected dtype U64, but it is I64 [2]"});
  EXPECT_NO_THROW(f.tensor("layer.bf16").as<std::uint16_t>(Dtype::bf16));
}

TEST(SafetensorsReader, ExpectDtypeAndShape) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(Sample().writer().serialize(), "sample.bin");
  const TensorView packed = f.tensor("layer.weight_packed");
  EXPECT_NO_THROW(packed.expect_dtype(Dtype::u8).expect_shape({2, 2}));
  expect_error(
      [&] {
        packed.expect_shape({2, 4});
      },
      {"tensor 'layer.weight_packed' in 'sample.bin': expected shape [2, 4], but it is U8 [2, 2]"});
  expect_error([&] { packed.expect_dtype(Dtype::f8_e4m3); }, {"expected dtype F8_E4M3, but it is U8 [2, 2]"});
}

TEST(SafetensorsReader, ScalarF32) {
  const float one = 1.0f;
  const float two[2] = {2.0f, 3.0f};
  const double d = 1.0;
  SafetensorsWriter w;
  w.add("rank0", Dtype::f32, {}, &one, 4);
  w.add("rank1", Dtype::f32, {1}, &one, 4);
  w.add("pair", Dtype::f32, {2}, two, 8);
  w.add("one_by_one", Dtype::f32, {1, 1}, &one, 4);
  w.add("double", Dtype::f64, {}, &d, 8);
  const SafetensorsFile f = SafetensorsFile::from_bytes(w.serialize(), "scalars");
  EXPECT_EQ(f.tensor("rank0").scalar_f32(), 1.0f);
  EXPECT_EQ(f.tensor("rank1").scalar_f32(), 1.0f);
  expect_error([&] { f.tensor("pair").scalar_f32(); },
               {"tensor 'pair' in 'scalars': expected an F32 scalar (shape [] or [1]), but it is F32 [2]"});
  expect_error([&] { f.tensor("one_by_one").scalar_f32(); }, {"but it is F32 [1, 1]"});
  expect_error([&] { f.tensor("double").scalar_f32(); }, {"but it is F64 []"});
}

TEST(SafetensorsReader, MisalignedDataIsRefusedInPlaceButCopies) {
  // A header without the format's padding puts the data at an offset that is not a multiple of 4.
  const float values[2] = {1.0f, -1.0f};
  const std::string header = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const SafetensorsFile f = SafetensorsFile::from_bytes(file_bytes(header, le_bytes(values, 8)), "unpadded");
  ASSERT_NE(f.data_offset() % 4, 0u);
  // from_bytes keeps the bytes in a heap buffer (aligned to 16), so the address is misaligned too.
  expect_error([&] { f.tensor("x").as<float>(); },
               {"tensor 'x' in 'unpadded': data at file offset", "is not aligned to 4 bytes", "to_vector()"});
  EXPECT_EQ(f.tensor("x").to_vector<float>(), (std::vector<float>{1.0f, -1.0f}));
}

TEST(SafetensorsReader, DtypeNamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(Dtype::u64); ++i) {
    const Dtype d = static_cast<Dtype>(i);
    ASSERT_EQ(dtype_from_name(dtype_name(d)), d) << dtype_name(d);
  }
  EXPECT_EQ(dtype_name(Dtype::f8_e4m3), "F8_E4M3");
  EXPECT_EQ(dtype_bits(Dtype::f4), 4);
  EXPECT_EQ(dtype_bits(Dtype::bf16), 16);
  EXPECT_EQ(dtype_bits(Dtype::c64), 64);
  EXPECT_FALSE(dtype_from_name("F8_E4M3FN").has_value());
  EXPECT_FALSE(dtype_from_name("bf16").has_value());
}

}  // namespace
}  // namespace fp4cl
