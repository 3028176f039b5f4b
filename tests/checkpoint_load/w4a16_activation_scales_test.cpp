// Regression: a W4A16 checkpoint stays W4A16 whatever activation scales it carries. Calibrated
// ModelOpt input_scale / compressed-tensors input_global_scale tensors, or garbage (NaN, zero,
// wrong dtype) under those names, change nothing: the prepared weights equal, byte for byte and
// bit for bit, those of the same checkpoint without them — the tensors are never read.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "checkpoint_fixture.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "load_test_support.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvfp4A16{WeightFormat::nvfp4, Activations::bf16};

enum class Garbage { calibrated, nan, zero, wrong_dtype };

struct Case {
  Layout layout;
  Garbage garbage;
};

class W4A16ActivationScales : public testing::TestWithParam<Case> {};

TEST_P(W4A16ActivationScales, AreIgnoredAndNeverRead) {
  ModelSpec spec = moe_model(GetParam().layout, kNvfp4A16, 1, 4);
  const FixtureCheckpoint clean = FixtureCheckpoint::build(spec);
  spec.activation_scales_in_w4a16 = true;
  FixtureCheckpoint carrying = FixtureCheckpoint::build(spec);
  int scales = 0;
  for (auto& [name, t] : carrying.tensors) {
    const bool activation_scale = name.size() > 12 && (name.rfind(".input_scale") == name.size() - 12 ||
                                                       name.find(".input_global_scale") != std::string::npos);
    if (!activation_scale) continue;
    ++scales;
    switch (GetParam().garbage) {
      case Garbage::calibrated:
        break;
      case Garbage::nan:
        carrying.set_f32(name, std::numeric_limits<float>::quiet_NaN());
        break;
      case Garbage::zero:
        carrying.set_f32(name, 0.0f);
        break;
      case Garbage::wrong_dtype:
        t = StoredTensor{Dtype::bf16, {3}, {1, 2, 3, 4, 5, 6}};
        break;
    }
  }
  ASSERT_EQ(scales, 4 + 4 * 3) << "every quantized module carries an activation scale";
  EXPECT_GT(carrying.tensors.size(), clean.tensors.size());

  TempDir a, b;
  clean.write(a.path());
  carrying.write(b.path());
  const Checkpoint without = Checkpoint::open(a.path());
  const Checkpoint with = Checkpoint::open(b.path());
  ASSERT_EQ(with.layers().size(), without.layers().size());
  for (const CheckpointLayer& layer : with.layers()) {
    SCOPED_TRACE(layer.name);
    EXPECT_EQ(layer.scheme, kNvfp4A16);
    EXPECT_EQ(layer.stored_bytes, without.layer(layer.name).stored_bytes);
    if (layer.kind == LayerKind::linear) {
      const LoadedLinear l = with.load_linear(layer.name);
      EXPECT_EQ(l.scheme, kNvfp4A16);
      expect_weights_equal(l.weight, without.load_linear(layer.name).weight);
      expect_weight_matches(l.weight, clean, layer.name);
    } else {
      const LoadedExperts x = with.load_moe(layer.name);
      EXPECT_EQ(x.scheme, kNvfp4A16);
      expect_experts_equal(x.experts, without.load_moe(layer.name).experts);
    }
  }
  // inspect says they are there and ignored.
  const CheckpointReport report = inspect_checkpoint(with);
  bool warned = false;
  for (const std::string& w : report.warnings) warned = warned || w.find("ignored, never read") != std::string::npos;
  EXPECT_TRUE(warned);
  for (const std::string& w : inspect_checkpoint(without).warnings) {
    EXPECT_EQ(w.find("ignored"), std::string::npos) << w;
  }
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  static const char* const kGarbage[] = {"Calibrated", "NaN", "Zero", "WrongDtype"};
  return std::string(info.param.layout == Layout::modelopt ? "ModelOpt" : "CompressedTensors") +
         kGarbage[static_cast<int>(info.param.garbage)];
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, W4A16ActivationScales,
                         testing::Values(Case{Layout::modelopt, Garbage::calibrated},
                                         Case{Layout::modelopt, Garbage::nan}, Case{Layout::modelopt, Garbage::zero},
                                         Case{Layout::modelopt, Garbage::wrong_dtype},
                                         Case{Layout::compressed_tensors, Garbage::calibrated},
                                         Case{Layout::compressed_tensors, Garbage::nan},
                                         Case{Layout::compressed_tensors, Garbage::zero},
                                         Case{Layout::compressed_tensors, Garbage::wrong_dtype}),
                         case_name);

}  // namespace
}  // namespace fp4cl::test
