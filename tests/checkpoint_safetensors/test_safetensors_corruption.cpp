// A small valid file cut at every length and with bytes flipped at every offset: each case
// must load correctly or fail with a clean fp4cl::Error — never crash, never read out of bounds
// (the buffers are exactly the file's size, so ASan sees any overread).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "checkpoint_safetensors/safetensors_test_util.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl {
namespace {

std::vector<std::uint8_t> sample_file() {
  SafetensorsWriter w;
  w.add("model.layers.0.mlp.weight_packed", Dtype::u8, {2, 4}, test::counting_bytes(8));
  w.add("model.layers.0.mlp.weight_scale", Dtype::f8_e4m3, {2, 1}, std::vector<std::uint8_t>{0x30, 0x38});
  w.add("model.layers.0.mlp.weight_global_scale", {1}, std::vector<float>{448.0f});
  w.add("bias", Dtype::bf16, {3}, std::vector<std::uint8_t>{0x80, 0x3F, 0x00, 0xC0, 0x00, 0x00});
  w.add("ids", {2}, std::vector<std::int64_t>{3, -4});
  w.add("s", Dtype::f32, {}, std::vector<std::uint8_t>{0, 0, 0x80, 0x3F});
  w.set_metadata("format", "pt");
  return w.serialize();
}

// Everything a successful load promises, checked against the buffer it came from.
void expect_consistent(const SafetensorsFile& f, const std::vector<std::uint8_t>& bytes,
                       const std::string& what) {
  ASSERT_LE(f.data_offset(), bytes.size()) << what;
  std::uint64_t covered = 0;
  std::set<std::string> names;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_TRUE(names.insert(t.name).second) << what;
    EXPECT_EQ(t.begin, covered) << what;
    covered = t.end;
    std::uint64_t bits = static_cast<std::uint64_t>(dtype_bits(t.dtype));
    for (std::int64_t d : t.shape) {
      ASSERT_GE(d, 0) << what;
      bits *= static_cast<std::uint64_t>(d);
    }
    EXPECT_EQ(bits, 8 * t.size_bytes()) << what;
    const TensorView v = f.tensor(t.name);
    ASSERT_EQ(v.bytes().size(), t.size_bytes()) << what;
    for (std::size_t i = 0; i < v.bytes().size(); ++i) {
      ASSERT_EQ(v.bytes()[i], bytes[static_cast<std::size_t>(f.data_offset() + t.begin) + i]) << what;
    }
  }
  EXPECT_EQ(f.data_offset() + covered, bytes.size()) << what;
}

// Loads `bytes`; returns whether it loaded. Anything but success or fp4cl::Error fails the test.
bool load_cleanly(const std::vector<std::uint8_t>& bytes, const std::string& what) {
  try {
    const SafetensorsFile f = SafetensorsFile::from_bytes(bytes, what);
    expect_consistent(f, bytes, what);
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("safetensors file '" + what + "'"), std::string::npos) << e.what();
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not an fp4cl::Error: " << e.what();
    return false;
  }
}

TEST(SafetensorsCorruption, EveryTruncationFailsCleanly) {
  const std::vector<std::uint8_t> file = sample_file();
  ASSERT_TRUE(load_cleanly(file, "whole"));
  for (std::size_t n = 0; n < file.size(); ++n) {
    const std::vector<std::uint8_t> cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(load_cleanly(cut, "cut at " + std::to_string(n))) << "a truncated file loaded";
  }
}

TEST(SafetensorsCorruption, TruncatedFilesOnDiskFailCleanly) {
  const std::vector<std::uint8_t> file = sample_file();
  test::TempDir dir;
  for (std::size_t n = 0; n < file.size(); n += 3) {  // through the mmap path
    const std::string path = dir.file("cut" + std::to_string(n) + ".safetensors");
    test::write_file(path,
                     std::vector<std::uint8_t>(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_THROW(SafetensorsFile::open(path), Error) << "cut at " << n;
  }
}

TEST(SafetensorsCorruption, EveryBitFlipLoadsConsistentlyOrFailsCleanly) {
  const std::vector<std::uint8_t> file = sample_file();
  const SafetensorsFile original = SafetensorsFile::from_bytes(file, "original");
  const std::size_t data_start = static_cast<std::size_t>(original.data_offset());
  for (std::size_t offset = 0; offset < file.size(); ++offset) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> flipped = file;
      flipped[offset] = static_cast<std::uint8_t>(flipped[offset] ^ (1u << bit));
      const std::string what = "flip " + std::to_string(offset) + "." + std::to_string(bit);
      const bool loaded = load_cleanly(flipped, what);
      if (offset < 8) {
        // Another header length moves the data section's start: the tensors can no longer
        // cover it exactly.
        EXPECT_FALSE(loaded) << what << ": a changed header length loaded";
      } else if (offset >= data_start) {
        EXPECT_TRUE(loaded) << what << ": the data section is opaque bytes";
      }
    }
  }
}

TEST(SafetensorsCorruption, ByteValuesAtEveryHeaderOffset) {
  // Bytes that are special to JSON or UTF-8, written over every byte of the header.
  const std::vector<std::uint8_t> file = sample_file();
  const std::size_t data_start =
      static_cast<std::size_t>(SafetensorsFile::from_bytes(file, "o").data_offset());
  for (std::size_t offset = 0; offset < data_start; ++offset) {
    for (int value : {0x00, 0x22, 0x2C, 0x2D, 0x30, 0x39, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x80, 0xC3, 0xFF}) {
      std::vector<std::uint8_t> changed = file;
      changed[offset] = static_cast<std::uint8_t>(value);
      load_cleanly(changed, "set " + std::to_string(offset) + "=" + std::to_string(value));
    }
  }
}

}  // namespace
}  // namespace fp4cl
