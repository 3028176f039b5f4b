// Every kind of bad checkpoint content is refused with an fp4cl::Error naming the tensor, the file
// and what was expected: NaN or negative block scales, bad global scales, wrong dtypes, shapes that
// disagree, missing tensors, incomplete or inconsistent MoE layers. Zero block scales and
// negative-zero codes are accepted (load_schemes_test.cpp loads fixtures full of them).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kMxfp4{WeightFormat::mxfp4, Activations::fp4_dynamic};

const std::string kQ = "model.layers.0.self_attn.q_proj";  // [64, 64]
const std::string kLayer = "model.layers.0";

std::string expert(std::int64_t e, int projection) { return expert_module(ExpertStyle::qwen3, kLayer, e, projection); }

// Opens `f` written to a fresh directory and loads every layer.
void open_and_load(const FixtureCheckpoint& f) {
  TempDir dir;
  f.write(dir.path());
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  for (const CheckpointLayer& l : ckpt.layers()) {
    if (l.kind == LayerKind::linear) {
      ckpt.load_linear(l.name);
    } else {
      ckpt.load_moe(l.name);
    }
  }
}

FixtureCheckpoint model(Layout layout, QuantScheme scheme = kNvfp4, std::int64_t experts = 8) {
  return FixtureCheckpoint::build(moe_model(layout, scheme, 1, experts));
}

class BadInput : public testing::TestWithParam<Layout> {
 protected:
  Layout layout() const { return GetParam(); }
};

TEST_P(BadInput, GoodFixtureLoads) { EXPECT_NO_THROW(open_and_load(model(layout()))); }

TEST_P(BadInput, NanE4m3BlockScale) {
  for (std::uint8_t nan : {std::uint8_t{0x7F}, std::uint8_t{0xFF}}) {
    FixtureCheckpoint f = model(layout());
    f.set_byte(f.scale_name(kQ), 4 * 7 + 2, nan);  // row 7, block 2
    expect_error([&] { open_and_load(f); },
                 {f.scale_name(kQ), "model.safetensors", "block scale [7, 2]", "NaN", "finite non-negative E4M3"});
  }
}

TEST_P(BadInput, NanE4m3BlockScaleOfAnExpert) {
  FixtureCheckpoint f = model(layout());
  f.set_byte(f.scale_name(expert(5, 2)), 0, 0x7F);
  expect_error([&] { open_and_load(f); }, {f.scale_name(expert(5, 2)), "model.safetensors", "[0, 0]", "NaN"});
}

TEST_P(BadInput, NegativeE4m3BlockScale) {
  FixtureCheckpoint f = model(layout());
  f.set_byte(f.scale_name(kQ), 1, 0xB0);  // -0.5
  expect_error([&] { open_and_load(f); }, {f.scale_name(kQ), "0xB0", "negative"});
}

TEST_P(BadInput, NegativeZeroAndZeroBlockScalesAreAccepted) {
  FixtureCheckpoint f = model(layout());
  f.set_byte(f.scale_name(kQ), 0, 0x80);
  f.set_byte(f.scale_name(kQ), 1, 0x00);
  EXPECT_NO_THROW(open_and_load(f));
}

TEST_P(BadInput, BadWeightGlobalScale) {
  const float bad[] = {0.0f,
                       -0.0f,
                       -1.0f,
                       std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (float value : bad) {
    FixtureCheckpoint f = model(layout());
    f.set_f32(f.global_scale_name(expert(3, 1)), value);
    SCOPED_TRACE(value);
    expect_error([&] { open_and_load(f); },
                 {f.global_scale_name(expert(3, 1)), "model.safetensors", "expected a finite positive F32",
                  layout() == Layout::modelopt ? "dequant direction" : "quant direction"});
  }
}

TEST_P(BadInput, BadInputGlobalScale) {
  FixtureCheckpoint f = model(layout());
  f.set_f32(f.input_scale_name(kQ), 0.0f);
  expect_error([&] { open_and_load(f); }, {f.input_scale_name(kQ), "global scale is 0", "finite positive"});
}

TEST_P(BadInput, GlobalScaleWithoutFiniteReciprocal) {
  FixtureCheckpoint f = model(layout());
  f.set_f32(f.global_scale_name(kQ), std::numeric_limits<float>::denorm_min());
  expect_error([&] { open_and_load(f); }, {f.global_scale_name(kQ), "no finite positive fp32 reciprocal"});
}

TEST_P(BadInput, WeightNotU8) {
  FixtureCheckpoint f = model(layout());
  f.tensors.at(f.weight_name(kQ)).dtype = Dtype::i8;
  expect_error([&] { open_and_load(f); }, {f.weight_name(kQ), "model.safetensors", "is I8 [64, 32]", "expected U8"});
}

TEST_P(BadInput, ExpertWeightNotU8) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& w = f.tensors.at(f.weight_name(expert(2, 0)));
  w.dtype = Dtype::bf16;  // same bytes, half the elements
  w.shape[1] /= 2;
  expect_error([&] { open_and_load(f); }, {f.weight_name(expert(2, 0)), "is BF16", "expected U8 [N, K/2]"});
}

TEST_P(BadInput, BlockScaleNotE4m3) {
  for (Dtype dtype : {Dtype::u8, Dtype::i8, Dtype::f8_e5m2}) {
    FixtureCheckpoint f = model(layout());
    f.tensors.at(f.scale_name(kQ)).dtype = dtype;
    expect_error([&] { open_and_load(f); },
                 {f.scale_name(kQ), "model.safetensors", std::string(dtype_name(dtype)) + " [64, 4]",
                  "expected F8_E4M3 [N, K/16] = [64, 4]"});
  }
}

TEST_P(BadInput, GlobalScaleNotF32) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& t = f.tensors.at(f.global_scale_name(kQ));
  t.dtype = Dtype::bf16;
  t.shape = {2};
  expect_error([&] { open_and_load(f); }, {f.global_scale_name(kQ), "is BF16 [2]", "expected F32 [] or [1]"});
}

TEST_P(BadInput, GlobalScaleNotAScalar) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& t = f.tensors.at(f.input_scale_name(kQ));
  t.shape = {2};
  t.bytes.resize(8);
  expect_error([&] { open_and_load(f); }, {f.input_scale_name(kQ), "is F32 [2]", "expected F32 [] or [1]"});
}

TEST_P(BadInput, ScaleColumnsDisagreeWithK) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& s = f.tensors.at(f.scale_name(kQ));
  s.shape = {64, 5};
  s.bytes.resize(64 * 5, 0x38);
  expect_error([&] { open_and_load(f); },
               {f.scale_name(kQ), "is F8_E4M3 [64, 5]", "[N, K/16] = [64, 4]", f.weight_name(kQ), "K = 64"});
}

TEST_P(BadInput, ScaleRowsDisagreeWithN) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& s = f.tensors.at(f.scale_name(kQ));
  s.shape = {63, 4};
  s.bytes.resize(63 * 4);
  expect_error([&] { open_and_load(f); }, {f.scale_name(kQ), "is F8_E4M3 [63, 4]", "[64, 4]"});
}

TEST_P(BadInput, KNotAMultipleOfTheBlock) {
  FixtureCheckpoint f = model(layout());
  StoredTensor& w = f.tensors.at(f.weight_name(kQ));
  w.shape = {64, 20};  // K = 40
  w.bytes.resize(64 * 20);
  StoredTensor& s = f.tensors.at(f.scale_name(kQ));
  s.shape = {64, 3};
  s.bytes.resize(64 * 3);
  expect_error([&] { open_and_load(f); },
               {f.weight_name(kQ), "K = 40 in-features is not a multiple of the NVFP4 block size 16"});
}

TEST_P(BadInput, MissingTensors) {
  const FixtureCheckpoint good = model(layout());
  for (const std::string& name : {good.scale_name(kQ), good.global_scale_name(kQ), good.input_scale_name(kQ),
                                  good.scale_name(expert(6, 1)), good.global_scale_name(expert(0, 2))}) {
    FixtureCheckpoint f = good;
    f.tensors.erase(name);
    SCOPED_TRACE(name);
    expect_error([&] { open_and_load(f); }, {"tensor '" + name + "' is missing from", "model.safetensors", "expected"});
  }
  // The weight itself: found through its block scale.
  FixtureCheckpoint f = good;
  f.tensors.erase(f.weight_name(kQ));
  expect_error([&] { open_and_load(f); }, {"tensor '" + f.weight_name(kQ) + "' is missing", "expected U8 [N, K/2]"});
}

TEST_P(BadInput, MissingExpertInTheMiddle) {
  FixtureCheckpoint f = model(layout());
  for (int p = 0; p < 3; ++p) {
    for (const std::string& n : {f.weight_name(expert(3, p)), f.scale_name(expert(3, p)),
                                 f.global_scale_name(expert(3, p)), f.input_scale_name(expert(3, p))}) {
      f.tensors.erase(n);
    }
  }
  expect_error([&] { open_and_load(f); },
               {"MoE layer 'model.layers.0.mlp.experts'", "expert 3 is missing", "experts 0–2, 4–7", "expected 0–7",
                f.weight_name(expert(3, 0)), "model.safetensors"});
}

TEST_P(BadInput, MissingLastExpertAgainstConfigJson) {
  FixtureCheckpoint f = model(layout());
  for (int p = 0; p < 3; ++p) {
    for (const std::string& n : {f.weight_name(expert(7, p)), f.scale_name(expert(7, p)),
                                 f.global_scale_name(expert(7, p)), f.input_scale_name(expert(7, p))}) {
      f.tensors.erase(n);
    }
  }
  expect_error([&] { open_and_load(f); },
               {"config.json", "num_experts", "says 8 experts", "experts 0–6", f.weight_name(expert(7, 0))});
}

TEST_P(BadInput, MissingProjectionOfAnExpert) {
  FixtureCheckpoint f = model(layout());
  for (const std::string& n : {f.weight_name(expert(5, 2)), f.scale_name(expert(5, 2)),
                               f.global_scale_name(expert(5, 2)), f.input_scale_name(expert(5, 2))}) {
    f.tensors.erase(n);
  }
  expect_error([&] { open_and_load(f); }, {"expert 5 has no quantized down projection", f.weight_name(expert(5, 2))});
}

// Replaces module `m`'s codes and block scales by zeros of [rows, cols].
void resize_module(FixtureCheckpoint& f, const std::string& m, std::int64_t rows, std::int64_t cols) {
  const std::int64_t block = f.spec().scheme.block_size();
  f.tensors.at(f.weight_name(m)) = {
      Dtype::u8, {rows, cols / 2}, std::vector<std::uint8_t>(static_cast<std::size_t>(rows * cols / 2))};
  StoredTensor& s = f.tensors.at(f.scale_name(m));
  s.shape = {rows, cols / block};
  s.bytes.assign(static_cast<std::size_t>(rows * cols / block), 0);
}

TEST_P(BadInput, GateAndUpSizesDiffer) {
  FixtureCheckpoint f = model(layout());  // I = 32, H = 64
  resize_module(f, expert(2, 1), 48, 64);
  expect_error([&] { open_and_load(f); },
               {"expert 2", "up projection weight '" + f.weight_name(expert(2, 1)) + "'", "model.safetensors",
                "[48, 64]", "gate projection weight", "[32, 64]", "expected equal sizes [I, H]"});
}

TEST_P(BadInput, DownShapeInconsistent) {
  FixtureCheckpoint f = model(layout());
  resize_module(f, expert(4, 2), 64, 64);
  expect_error([&] { open_and_load(f); }, {"expert 4", "down projection weight '" + f.weight_name(expert(4, 2)) + "'",
                                           "[64, 64]", "expected [H, I] = [64, 32]"});
}

TEST_P(BadInput, ExpertSizesDifferAcrossExperts) {
  FixtureCheckpoint f = model(layout());
  resize_module(f, expert(1, 0), 64, 64);
  resize_module(f, expert(1, 1), 64, 64);
  resize_module(f, expert(1, 2), 64, 64);
  expect_error([&] { open_and_load(f); }, {"expert 1's gate projection", "[64, 64] but expert 0's is [32, 64]"});
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, BadInput, testing::Values(Layout::modelopt, Layout::compressed_tensors),
                         [](const testing::TestParamInfo<Layout>& i) {
                           return std::string(i.param == Layout::modelopt ? "ModelOpt" : "CompressedTensors");
                         });

// MXFP4 (compressed-tensors only): E8M0 scales.
TEST(BadMxfp4Input, NanE8m0BlockScale) {
  FixtureCheckpoint f = model(Layout::compressed_tensors, kMxfp4);
  f.set_byte(f.scale_name(kQ), 2 * 9 + 1, 0xFF);  // row 9, block 1
  expect_error([&] { open_and_load(f); },
               {f.scale_name(kQ), "model.safetensors", "block scale [9, 1]", "NaN (E8M0 0xFF)", "E8M0"});
}

TEST(BadMxfp4Input, E8m0ScalesAcceptEveryOtherByte) {
  FixtureCheckpoint f = model(Layout::compressed_tensors, kMxfp4);
  f.set_byte(f.scale_name(kQ), 0, 0x00);
  f.set_byte(f.scale_name(kQ), 1, 0xFE);
  f.set_byte(f.scale_name(kQ), 2, 0x80);
  EXPECT_NO_THROW(open_and_load(f));
}

TEST(BadMxfp4Input, ScaleDtypeAndShape) {
  FixtureCheckpoint f = model(Layout::compressed_tensors, kMxfp4);
  f.tensors.at(f.scale_name(kQ)).dtype = Dtype::f8_e4m3;
  expect_error([&] { open_and_load(f); },
               {f.scale_name(kQ), "is F8_E4M3 [64, 2]", "expected U8 (or F8_E8M0) [N, K/32] = [64, 2]"});

  FixtureCheckpoint g = model(Layout::compressed_tensors, kMxfp4);
  StoredTensor& s = g.tensors.at(g.scale_name(kQ));
  s.shape = {64, 4};  // K/16: an NVFP4-shaped scale
  s.bytes.resize(64 * 4);
  expect_error([&] { open_and_load(g); }, {g.scale_name(kQ), "is U8 [64, 4]", "[N, K/32] = [64, 2]"});

  FixtureCheckpoint h = model(Layout::compressed_tensors, kMxfp4);
  h.tensors.at(h.scale_name(kQ)).dtype = Dtype::f8_e8m0;  // float8_e8m0fnu: accepted
  EXPECT_NO_THROW(open_and_load(h));
}

}  // namespace
}  // namespace fp4cl::test
