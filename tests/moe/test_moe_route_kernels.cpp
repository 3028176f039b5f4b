// The two kernels that route router logits by plain softmax top-k, each forced on the test's
// device (MoeSoftmaxRouter): moe_route_logits (a work-item a token; what CPUs run) and
// moe_route_grouped with ROUTE_LOGIT_KEYS (a work-group a token; what GPUs run). Each must choose
// the reference's experts in its slot order, with weights within the reference's fp32 bound, the
// shared experts' slots after them; and the two must choose the same experts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp4cl/moe_logit_routing.hpp"
#include "layers/moe_pipeline.hpp"
#include "moe_test_support.hpp"
#include "reference/moe_reference.hpp"

namespace fp4cl::test {
namespace {

struct Routed {
  std::vector<std::int32_t> expert;
  std::vector<float> weight;
  std::vector<std::int32_t> status;
};

template <typename T>
cl::Buffer buffer_of(const Context& ctx, const std::vector<T>& v) {
  return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, v.size() * sizeof(T),
                    const_cast<T*>(v.data()));
}

// Routes `logits` [T, E] with `shared` shared experts after the k routed slots, through the kernel
// `softmax` picks.
Routed route(MoeSoftmaxRouter softmax, const std::vector<float>& logits, std::int64_t tokens, std::int64_t experts,
             int k, int shared, bool renormalize) {
  const Context& ctx = test_context();
  MoeShape shape;
  shape.global_experts = experts;
  shape.local_experts = experts + shared;
  shape.routed_k = k;
  shape.top_k = k + shared;
  MoeRouter router(ctx, shape, MoeLogitRouting{}, softmax);
  std::vector<std::int32_t> map(static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e) map[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
  MoeDeviceWeights w;
  w.expert_map = buffer_of(ctx, map);
  const auto pairs = static_cast<std::size_t>(tokens * shape.top_k);
  MoeWorkspace ws;
  ws.pair_expert = buffer_of(ctx, std::vector<std::int32_t>(pairs, -7));
  ws.pair_weight = buffer_of(ctx, std::vector<float>(pairs, NAN));
  ws.status = buffer_of(ctx, std::vector<std::int32_t>(4, -1));
  const cl::Buffer lb = buffer_of(ctx, logits);
  MoeChunk chunk;
  chunk.tokens = tokens;
  chunk.routing.logits = &lb;
  chunk.routing.renormalize = renormalize;
  std::vector<MoeLaunch> launches;
  cl::Event last;
  router.enqueue(ctx.queue(), shape, w, ws, chunk, launches, last);
  EXPECT_EQ(launches.size(), 1u);
  if (!launches.empty()) {
    EXPECT_EQ(launches[0].kernel, softmax == MoeSoftmaxRouter::work_item ? "moe_route_logits" : "moe_route_grouped");
  }
  Routed r;
  r.expert.resize(pairs);
  r.weight.resize(pairs);
  r.status.resize(4);
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(ws.pair_expert, CL_TRUE, 0, pairs * 4, r.expert.data()), CL_SUCCESS);
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(ws.pair_weight, CL_TRUE, 0, pairs * 4, r.weight.data()), CL_SUCCESS);
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(ws.status, CL_TRUE, 0, 16, r.status.data()), CL_SUCCESS);
  return r;
}

struct Case {
  std::int64_t experts;
  int k;
};

class MoeRouteKernels : public testing::TestWithParam<MoeSoftmaxRouter> {};

TEST_P(MoeRouteKernels, SoftmaxTopkMatchesTheReference) {
  // mixtral-8x7b's 8 experts top-2, gpt-oss's 32 top-4, qwen3's 128 top-8, DeepSeek's 256 top-8,
  // and 384 (more experts than a work-group's 256 work-items).
  for (const Case c : {Case{8, 2}, Case{32, 4}, Case{128, 8}, Case{256, 8}, Case{384, 8}}) {
    for (const std::int64_t tokens : {std::int64_t{1}, std::int64_t{5}, std::int64_t{37}}) {
      for (const int shared : {0, 1}) {
        const bool renormalize = (tokens + shared) % 2 == 1;
        SCOPED_TRACE("E " + std::to_string(c.experts) + " k " + std::to_string(c.k) + " T " + std::to_string(tokens) +
                     " shared " + std::to_string(shared) + (renormalize ? " renormalized" : ""));
        std::mt19937 rng(static_cast<std::uint32_t>(c.experts * 100 + tokens * 2 + shared));
        std::normal_distribution<float> normal(0.0f, 2.0f);
        std::vector<float> logits(static_cast<std::size_t>(tokens * c.experts));
        for (float& v : logits) v = normal(rng);
        if (tokens > 1) {
          // Token 1: a tie between its experts 0 and 1 (the lower index first) at the top, and a
          // NaN, which ranks below every number.
          logits[static_cast<std::size_t>(c.experts)] = 9.0f;
          logits[static_cast<std::size_t>(c.experts + 1)] = 9.0f;
          logits[static_cast<std::size_t>(c.experts + 2)] = std::numeric_limits<float>::quiet_NaN();
        }
        const reference::MoeRouting ref =
            reference::routing_from_logits(logits, tokens, c.experts, c.k, renormalize);
        const Routed r = route(GetParam(), logits, tokens, c.experts, c.k, shared, renormalize);
        EXPECT_EQ(r.status[0], -1);  // nothing invalid recorded
        const int pairs = c.k + shared;
        for (std::int64_t t = 0; t < tokens; ++t) {
          for (int s = 0; s < pairs; ++s) {
            const auto p = static_cast<std::size_t>(t * pairs + s);
            if (s >= c.k) {
              EXPECT_EQ(r.expert[p], c.experts + s - c.k) << "token " << t << " shared slot " << s;
              EXPECT_EQ(r.weight[p], 1.0f);
              continue;
            }
            const auto q = static_cast<std::size_t>(t * c.k + s);
            ASSERT_EQ(r.expert[p], ref.ids[q]) << "token " << t << " slot " << s;
            const double w = ref.weights[q];
            if (std::isnan(w)) {  // a NaN logit in the token's softmax sum: every weight NaN, as in torch
              EXPECT_TRUE(std::isnan(r.weight[p])) << "token " << t << " slot " << s << ": " << r.weight[p];
              continue;
            }
            EXPECT_LE(std::fabs(r.weight[p] - w), ref.weight_rel_error * std::fabs(w) + ref.weight_abs_error)
                << "token " << t << " slot " << s << ": " << r.weight[p] << " against " << w;
          }
        }
        if (tokens > 1) {
          EXPECT_EQ(r.expert[static_cast<std::size_t>(pairs)], 0);  // the tie: lower index first
          EXPECT_EQ(r.expert[static_cast<std::size_t>(pairs + 1)], 1);
        }
      }
    }
  }
}

TEST(MoeRouteKernels, BothKernelsChooseTheSameExpertsTwiceOver) {
  const std::int64_t tokens = 64, experts = 128;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<std::size_t>(tokens * experts));
  for (float& v : logits) v = normal(rng);
  const Routed a = route(MoeSoftmaxRouter::work_item, logits, tokens, experts, 8, 0, true);
  const Routed b = route(MoeSoftmaxRouter::work_group, logits, tokens, experts, 8, 0, true);
  EXPECT_EQ(a.expert, b.expert);
  const Routed b2 = route(MoeSoftmaxRouter::work_group, logits, tokens, experts, 8, 0, true);
  EXPECT_EQ(b.expert, b2.expert);
  EXPECT_EQ(b.weight, b2.weight);  // deterministic: the same bits again
}

INSTANTIATE_TEST_SUITE_P(Kernels, MoeRouteKernels,
                         testing::Values(MoeSoftmaxRouter::work_item, MoeSoftmaxRouter::work_group),
                         [](const testing::TestParamInfo<MoeSoftmaxRouter>& p) {
                           return p.param == MoeSoftmaxRouter::work_item ? std::string("WorkItem")
                                                                         : std::string("WorkGroup");
                         });

}  // namespace
}  // namespace fp4cl::test
