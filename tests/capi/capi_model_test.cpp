// C API models: opening a checkpoint directory (and refusing what is not one, naming why), the
// layer list in model order with shapes and schemes, and finding layers by name or prefix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "capi/capi_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {
namespace {

TEST(CapiModel, ListsTheCheckpointsLayersInModelOrderWithShapesAndSchemes) {
  for (const Variant& variant : every_layout_and_scheme()) {
    SCOPED_TRACE(variant_name(variant));
    ModelPtr model = open_model(variant);
    const Checkpoint ckpt = Checkpoint::open(quantized_model(variant));
    size_t count = 0;
    ASSERT_EQ(fp4cl_model_layer_count(model.get(), &count), FP4CL_SUCCESS);
    ASSERT_EQ(count, ckpt.layers().size());
    ASSERT_EQ(count, 5u);  // q, k, v, o projections and the MoE layer
    for (size_t i = 0; i < count; ++i) {
      const CheckpointLayer& expected = ckpt.layers()[i];
      fp4cl_layer_info info;
      ASSERT_EQ(fp4cl_model_layer_info(model.get(), i, &info), FP4CL_SUCCESS) << fp4cl_last_error();
      EXPECT_EQ(std::string(info.name), expected.name);
      EXPECT_EQ(info.weight_format, variant.scheme.weight == WeightFormat::nvfp4 ? FP4CL_WEIGHT_NVFP4 : FP4CL_WEIGHT_MXFP4);
      EXPECT_EQ(info.activations, variant.scheme.w4a16() ? FP4CL_ACTIVATIONS_BF16 : FP4CL_ACTIVATIONS_FP4);
      if (expected.kind == LayerKind::moe) {
        EXPECT_EQ(info.kind, FP4CL_LAYER_MOE);
        EXPECT_EQ(info.num_experts, 4);
        EXPECT_EQ(info.hidden, 64);
        EXPECT_EQ(info.intermediate, 32);
        EXPECT_EQ(info.top_k, 2);
        EXPECT_EQ(info.out_features, 0);
      } else {
        EXPECT_EQ(info.kind, FP4CL_LAYER_LINEAR);
        EXPECT_EQ(info.out_features, expected.out_features);
        EXPECT_EQ(info.in_features, expected.in_features);
        EXPECT_EQ(info.num_experts, 0);
        EXPECT_EQ(info.top_k, 0);
      }
      size_t found = 99;
      ASSERT_EQ(fp4cl_model_find_layer(model.get(), info.name, &found), FP4CL_SUCCESS);
      EXPECT_EQ(found, i);
    }
  }
}

TEST(CapiModel, FindsAnMoeLayerByItsDecoderLayerPrefix) {
  ModelPtr model = open_model();
  size_t by_prefix = 99, by_name = 98;
  ASSERT_EQ(fp4cl_model_find_layer(model.get(), "model.layers.0", &by_prefix), FP4CL_SUCCESS) << fp4cl_last_error();
  ASSERT_EQ(fp4cl_model_find_layer(model.get(), "model.layers.0.mlp.experts", &by_name), FP4CL_SUCCESS);
  EXPECT_EQ(by_prefix, by_name);
}

TEST(CapiModel, AMissingLayerIsNotFoundNamingItAndIndexOutOfRangeToo) {
  ModelPtr model = open_model();
  size_t index = 77;
  expect_error(fp4cl_model_find_layer(model.get(), "model.layers.9.mlp", &index), FP4CL_ERROR_NOT_FOUND,
               {"model.layers.9.mlp", "5 layers"});
  EXPECT_EQ(index, 77u);
  fp4cl_layer_info info;
  expect_error(fp4cl_model_layer_info(model.get(), 5, &info), FP4CL_ERROR_NOT_FOUND, {"index 5", "5 quantized layers"});
}

TEST(CapiModel, AMissingDirectoryIsAnInvalidModelNamingIt) {
  fp4cl_model* model = nullptr;
  expect_error(fp4cl_model_open(c_context(), "/nonexistent/fp4cl-model", &model), FP4CL_ERROR_INVALID_MODEL,
               {"fp4cl_model_open", "/nonexistent/fp4cl-model"});
  expect_error(fp4cl_model_open(c_context(), "", &model), FP4CL_ERROR_INVALID_ARGUMENT, {"directory is empty"});
  EXPECT_EQ(model, nullptr);
}

TEST(CapiModel, ADirectoryWithoutTensorsOrWithBrokenConfigIsAnInvalidModel) {
  TempDir empty("fp4cl-capi-empty");
  fp4cl_model* model = nullptr;
  expect_error(fp4cl_model_open(c_context(), empty.str().c_str(), &model), FP4CL_ERROR_INVALID_MODEL,
               {empty.str()});
  TempDir broken("fp4cl-capi-broken");
  for (const auto& entry : std::filesystem::directory_iterator(quantized_model(default_variant())))
    std::filesystem::copy(entry.path(), broken.path() / entry.path().filename());
  std::ofstream(broken.path() / "config.json") << "{ \"quantization_config\": ";  // truncated JSON
  expect_error(fp4cl_model_open(c_context(), broken.str().c_str(), &model), FP4CL_ERROR_INVALID_MODEL,
               {"config.json"});
  EXPECT_EQ(model, nullptr);
}

}  // namespace
}  // namespace fp4cl::test
