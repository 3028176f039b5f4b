// A real small checkpoint file, truncated at many lengths and with bytes flipped at many offsets:
// every case either loads — and then what it loads is what the file holds, with valid scales — or
// fails with a clean fp4cl::Error. Never a crash, never another exception.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};

bool finite_positive(float x) { return std::isfinite(x) && x > 0.0f; }

bool scales_valid(const std::vector<std::uint8_t>& scales) {
  for (std::uint8_t s : scales) {
    if ((s & 0x7F) == 0x7F || (s > 0x80)) return false;
  }
  return true;
}

// Every layer of the checkpoint in `dir`, loaded and checked against the file's own bytes.
// Returns true when it loads, false on fp4cl::Error; anything else fails the test.
bool load_everything(const std::filesystem::path& dir, std::string& what) {
  try {
    const Checkpoint ckpt = Checkpoint::open(dir);
    inspect_checkpoint(ckpt);
    const TensorLayout layout = ckpt.config().layout(kNvfp4);
    for (const CheckpointLayer& l : ckpt.layers()) {
      if (l.kind == LayerKind::linear) {
        const Fp4Weight w = ckpt.load_linear(l.name).weight;
        const Span<const std::uint8_t> codes = ckpt.tensors().tensor(l.name + "." + layout.weight).bytes();
        EXPECT_EQ(w.packed, std::vector<std::uint8_t>(codes.begin(), codes.end())) << l.name;
        EXPECT_EQ(static_cast<std::int64_t>(w.scales.size()), w.n * w.k / 16) << l.name;
        EXPECT_TRUE(scales_valid(w.scales)) << l.name;
        EXPECT_TRUE(finite_positive(w.global_scale) && finite_positive(w.input_global_scale) &&
                    finite_positive(w.input_scale))
            << l.name;
      } else {
        const Fp4Experts x = ckpt.load_moe(l.name).experts;
        EXPECT_EQ(static_cast<std::int64_t>(x.w13_packed.size()), x.num_experts * x.intermediate * x.hidden) << l.name;
        EXPECT_EQ(static_cast<std::int64_t>(x.w2_scales.size()), x.num_experts * x.intermediate * x.hidden / 16);
        EXPECT_TRUE(scales_valid(x.w13_scales) && scales_valid(x.w2_scales)) << l.name;
        for (float s : x.w13_global_scale) EXPECT_TRUE(finite_positive(s)) << l.name;
        for (float s : x.w13_input_global_scale) EXPECT_TRUE(finite_positive(s)) << l.name;
      }
    }
    return true;
  } catch (const Error& e) {
    what = e.what();
    EXPECT_FALSE(what.empty());
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an fp4cl::Error: " << e.what();
    return false;
  }
}

class CorruptionSweep : public testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    const FixtureCheckpoint f = FixtureCheckpoint::build(moe_model(GetParam(), kNvfp4, 1, 2, 32, 32));
    f.write(dir_.path());
    bytes_ = f.serialize();
    std::uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= std::uint64_t{bytes_[static_cast<std::size_t>(i)]} << (8 * i);
    data_start_ = static_cast<std::size_t>(8 + header);
    ASSERT_LT(data_start_, bytes_.size());
  }

  // Overwrites one byte of the file in place (no truncation: cheap, and the file keeps its size).
  void poke(std::size_t offset, std::uint8_t value) {
    std::fstream io(dir_.path() / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(offset));
    io.put(static_cast<char>(value));
    ASSERT_TRUE(io.good());
  }

  void put(const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(dir_.path() / "model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

  TempDir dir_;
  std::vector<std::uint8_t> bytes_;
  std::size_t data_start_ = 0;
};

TEST_P(CorruptionSweep, IntactFileLoads) {
  std::string what;
  EXPECT_TRUE(load_everything(dir_.path(), what)) << what;
}

TEST_P(CorruptionSweep, TruncatedAtManyLengths) {
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n < 64; ++n) lengths.push_back(n);
  for (std::size_t n = 64; n < bytes_.size(); n += 53) lengths.push_back(n);
  for (std::size_t n = data_start_ - 8; n < data_start_ + 8; ++n) lengths.push_back(n);
  for (std::size_t n = bytes_.size() - 16; n < bytes_.size(); ++n) lengths.push_back(n);
  int refused = 0;
  for (std::size_t n : lengths) {
    put(std::vector<std::uint8_t>(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(n)));
    std::string what;
    SCOPED_TRACE(n);
    if (!load_everything(dir_.path(), what)) ++refused;
  }
  EXPECT_EQ(refused, static_cast<int>(lengths.size())) << "every truncated file is refused";
}

TEST_P(CorruptionSweep, BytesFlippedAtManyOffsets) {
  struct Flip {
    std::size_t offset;
    std::uint8_t value;
  };
  std::vector<Flip> flips;
  // Header: every offset of the length prefix and the JSON's start, then a stride through the
  // JSON with the edits taking turns (bit flips, and characters that break or reshape JSON).
  const int xors[] = {0x01, 0x20, 0x80};
  const char chars[] = {'"', '}', ',', '9', '\0'};
  auto header_edit = [&](std::size_t i, std::size_t k) {
    const std::size_t v = k % 8;
    return static_cast<std::uint8_t>(v < 3 ? bytes_[i] ^ xors[v] : static_cast<std::uint8_t>(chars[v - 3]));
  };
  for (std::size_t i = 0; i < 24; ++i) {
    for (std::size_t k = 0; k < 8; ++k) flips.push_back({i, header_edit(i, k)});
  }
  for (std::size_t i = 24, k = 0; i < data_start_; i += 5, ++k) flips.push_back({i, header_edit(i, k)});
  // Data: codes, block scales (0x7F is a NaN scale) and global scales.
  for (std::size_t i = data_start_; i < bytes_.size(); i += 13) {
    flips.push_back({i, static_cast<std::uint8_t>(bytes_[i] ^ 0xFF)});
    flips.push_back({i, 0x7F});
  }
  int loaded = 0, refused = 0;
  put(bytes_);
  for (const Flip& f : flips) {
    poke(f.offset, f.value);
    std::string what;
    SCOPED_TRACE(testing::Message() << "offset " << f.offset << " = 0x" << std::hex << int{f.value});
    (load_everything(dir_.path(), what) ? loaded : refused)++;
    poke(f.offset, bytes_[f.offset]);
  }
  // Both outcomes occur: the sweep reaches the header checks and the value checks, and data
  // bytes that remain valid values load.
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
  RecordProperty("cases", static_cast<int>(flips.size()));
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, CorruptionSweep, testing::Values(Layout::modelopt, Layout::compressed_tensors),
                         [](const testing::TestParamInfo<Layout>& i) {
                           return std::string(i.param == Layout::modelopt ? "ModelOpt" : "CompressedTensors");
                         });

}  // namespace
}  // namespace fp4cl::test
