// C API thread-safety contract (fp4cl.h "Thread safety"): one context and one model shared by
// several threads, each with its own layer handles, give every thread the single-threaded bits.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "capi/capi_support.hpp"

namespace fp4cl::test {
namespace {

TEST(CapiThreads, LayersOfOneModelRunConcurrentlyWithTheSingleThreadedBits) {
  ModelPtr model = open_model();
  constexpr std::int64_t kTokens = 4;
  const std::vector<std::uint16_t> x = gaussian_bf16(kTokens, 64, 71);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  for (std::int64_t t = 0; t < kTokens; ++t) {
    ids.insert(ids.end(), {static_cast<std::int32_t>(t % 4), static_cast<std::int32_t>((t + 2) % 4)});
    weights.insert(weights.end(), {0.75f, 0.25f});
  }
  auto run = [&](std::vector<std::uint16_t>& linear_out, std::vector<std::uint16_t>& moe_out) {
    fp4cl_linear* l = nullptr;
    fp4cl_moe* m = nullptr;
    linear_out.assign(x.size(), 0);
    moe_out.assign(x.size(), 0);
    if (fp4cl_model_get_linear(model.get(), "model.layers.0.self_attn.q_proj", nullptr, &l) != FP4CL_SUCCESS ||
        fp4cl_model_get_moe(model.get(), "model.layers.0", nullptr, &m) != FP4CL_SUCCESS)
      return std::string(fp4cl_last_error());
    std::string error;
    for (int repeat = 0; repeat < 3 && error.empty(); ++repeat) {
      if (fp4cl_linear_run(l, x.data(), x.size() * 2, kTokens, linear_out.data(), linear_out.size() * 2) !=
              FP4CL_SUCCESS ||
          fp4cl_moe_run(m, x.data(), x.size() * 2, ids.data(), ids.size() * 4, weights.data(), weights.size() * 4,
                        kTokens, moe_out.data(), moe_out.size() * 2) != FP4CL_SUCCESS)
        error = fp4cl_last_error();
    }
    fp4cl_linear_release(l);
    fp4cl_moe_release(m);
    return error;
  };
  std::vector<std::uint16_t> linear_single, moe_single;
  ASSERT_EQ(run(linear_single, moe_single), "");

  constexpr int kThreads = 4;
  std::vector<std::vector<std::uint16_t>> linear_out(kThreads), moe_out(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { errors[static_cast<std::size_t>(i)] = run(linear_out[i], moe_out[i]); });
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[i], "") << "thread " << i;
    EXPECT_EQ(linear_out[i], linear_single) << "thread " << i;
    EXPECT_EQ(moe_out[i], moe_single) << "thread " << i;
  }
}

}  // namespace
}  // namespace fp4cl::test
