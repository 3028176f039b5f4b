// The partition helpers of expert parallelism (no device): contiguous maps, the check that maps
// own every expert once, and the slice of the stacked experts a shard holds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/expert_parallel.hpp"
#include "moe/moe_test_support.hpp"
#include "support/errors.hpp"

namespace fp4cl::test {
namespace {

using Map = std::vector<std::int32_t>;

TEST(ContiguousExpertMaps, SplitsInOrderWithTheRemainderFirst) {
  const auto maps = contiguous_expert_maps(10, 3);
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0], (Map{0, 1, 2, 3, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(maps[1], (Map{-1, -1, -1, -1, 0, 1, 2, -1, -1, -1}));
  EXPECT_EQ(maps[2], (Map{-1, -1, -1, -1, -1, -1, -1, 0, 1, 2}));
  EXPECT_NO_THROW(check_expert_partition(maps, 10));
  EXPECT_EQ(contiguous_expert_maps(4, 1), (std::vector<Map>{{0, 1, 2, 3}}));
  EXPECT_EQ(contiguous_expert_maps(2, 2), (std::vector<Map>{{0, -1}, {-1, 0}}));
}

TEST(ContiguousExpertMaps, RefusesImpossibleSplits) {
  EXPECT_ERROR_HAS(contiguous_expert_maps(8, 0), "0 shards");
  EXPECT_ERROR_HAS(contiguous_expert_maps(3, 4), "3 experts cannot be split over 4 shards");
}

TEST(CheckExpertPartition, NamesTheExpertOrShardAtFault) {
  EXPECT_ERROR_HAS(check_expert_partition({}, 4), "no expert maps");
  EXPECT_ERROR_HAS(check_expert_partition({{0, 1, -1}, {-1, -1, 0, 1}}, 4), "shard 0 has 3 entries; expected 4");
  EXPECT_ERROR_HAS(check_expert_partition({{0, 1, 2, 3}, {-1, -1, -1, -1}}, 4), "shard 1 owns no expert");
  EXPECT_ERROR_HAS(check_expert_partition({{0, 1, -1, -1}, {-1, 0, 1, 2}}, 4),
                   "global expert 1 is local on shard 0 and on shard 1");
  EXPECT_ERROR_HAS(check_expert_partition({{0, -1, -1, -1}, {-1, 0, -1, 1}}, 4),
                   "global expert 2 is local on no shard");
  EXPECT_ERROR_HAS(check_expert_partition({{0, 0, -1, -1}, {-1, -1, 0, 1}}, 4),
                   "shard 0: MoE expert_map[0] and expert_map[1] both name local expert 0");
  EXPECT_ERROR_HAS(check_expert_partition({{0, 5, -1, -1}, {-1, -1, 0, 1}}, 4), "shard 0: MoE expert_map[1] = 5");
  EXPECT_ERROR_HAS(check_expert_partition({{0, -2, -1, -1}, {-1, 1, 0, 1}}, 4), "expert_map[1] = -2");
  // A round-robin split is a partition too.
  EXPECT_NO_THROW(check_expert_partition({{0, -1, 1, -1}, {-1, 0, -1, 1}}, 4));
}

TEST(SliceExperts, TakesTheLocalExpertsInLocalOrder) {
  const Fp4Experts all = make_experts({WeightFormat::nvfp4, 5, 32, 32, Data::generic, 3});
  // Local 0 = global 3, local 1 = global 0, local 2 = global 4.
  const Fp4Experts s = slice_experts(all, {1, -1, -1, 0, 2});
  ASSERT_EQ(s.num_experts, 3);
  EXPECT_EQ(s.hidden, all.hidden);
  EXPECT_EQ(s.intermediate, all.intermediate);
  EXPECT_EQ(s.format, all.format);
  const int global_of[] = {3, 0, 4};
  const auto expect_part = [&](const auto& sliced, const auto& full, const char* name) {
    const std::size_t per = full.size() / 5;
    ASSERT_EQ(sliced.size(), 3 * per) << name;
    for (std::size_t l = 0; l < 3; ++l)
      for (std::size_t i = 0; i < per; ++i)
        ASSERT_EQ(sliced[l * per + i], full[static_cast<std::size_t>(global_of[l]) * per + i])
            << name << " local " << l;
  };
  expect_part(s.w13_packed, all.w13_packed, "w13_packed");
  expect_part(s.w13_scales, all.w13_scales, "w13_scales");
  expect_part(s.w2_packed, all.w2_packed, "w2_packed");
  expect_part(s.w2_scales, all.w2_scales, "w2_scales");
  expect_part(s.w13_global_scale, all.w13_global_scale, "w13_global_scale");
  expect_part(s.w2_global_scale, all.w2_global_scale, "w2_global_scale");
  expect_part(s.w13_input_global_scale, all.w13_input_global_scale, "w13_input_global_scale");
  expect_part(s.w2_input_global_scale, all.w2_input_global_scale, "w2_input_global_scale");
  expect_part(s.w13_input_scale, all.w13_input_scale, "w13_input_scale");
  expect_part(s.w2_input_scale, all.w2_input_scale, "w2_input_scale");
  // The identity map gives the whole stack back.
  const Fp4Experts same = slice_experts(all, {0, 1, 2, 3, 4});
  EXPECT_EQ(same.w13_packed, all.w13_packed);
  EXPECT_EQ(same.w2_scales, all.w2_scales);
  EXPECT_EQ(same.w13_input_scale, all.w13_input_scale);
}

TEST(SliceExperts, EmptyPerExpertTensorsStayEmpty) {
  const Fp4Experts all = make_experts({WeightFormat::mxfp4, 4, 64, 32, Data::exact, 5});
  ASSERT_TRUE(all.w13_input_scale.empty());
  const Fp4Experts s = slice_experts(all, {-1, 0, -1, -1});
  EXPECT_EQ(s.num_experts, 1);
  EXPECT_TRUE(s.w13_input_scale.empty());
  EXPECT_EQ(s.w2_global_scale, std::vector<float>{1.0f});
}

TEST(SliceExperts, BadMapsAndTensorsAreClearErrors) {
  const Fp4Experts all = make_experts({WeightFormat::nvfp4, 4, 32, 32, Data::exact, 7});
  EXPECT_ERROR_HAS(slice_experts(all, {0, 1, 2}), "the expert_map has 3 entries; the experts are 4");
  EXPECT_ERROR_HAS(slice_experts(all, {-1, -1, -1, -1}), "names no local expert");
  EXPECT_ERROR_HAS(slice_experts(all, {0, 2, -1, -1}), "expert_map[1] = 2");
  Fp4Experts broken = all;
  broken.w2_scales.pop_back();
  EXPECT_ERROR_HAS(slice_experts(broken, {0, -1, -1, -1}), "Fp4Experts::w2_scales has");
}

}  // namespace
}  // namespace fp4cl::test
