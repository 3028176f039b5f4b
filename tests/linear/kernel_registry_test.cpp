// The kernel selection template (host/kernels/registry.hpp) with stand-in strategies: priority
// order, recorded refusals, the filter, forcing by name or environment, and its errors.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "kernels/registry.hpp"
#include "linear/linear_test_support.hpp"

namespace fp4cl {
namespace {

struct FakeConfig {
  int size = 0;
};

// A strategy that runs where `runs` says and serves sizes up to `max_size`.
class FakeKernel {
 public:
  FakeKernel(std::string name, bool runs, int max_size) : name_(std::move(name)), runs_(runs), max_size_(max_size) {}
  Verdict is_supported(const Context&) const { return runs_ ? Verdict::yes() : Verdict::no(name_ + " needs a GPU"); }
  Verdict can_implement(const FakeConfig& c) const {
    return c.size <= max_size_ ? Verdict::yes() : Verdict::no(name_ + " serves sizes up to " + std::to_string(max_size_));
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool runs_;
  int max_size_;
};

using Registry = KernelRegistry<FakeKernel, FakeConfig>;

Registry make_registry() {
  Registry r("fake", "FP4CL_FAKE_KERNEL");
  r.add("gpu_only", [] { return std::make_unique<FakeKernel>("gpu_only", false, 1000); });
  r.add("small", [] { return std::make_unique<FakeKernel>("small", true, 10); });
  r.add("any", [] { return std::make_unique<FakeKernel>("any", true, 1000); });
  return r;
}

using test::context;
using test::error_of;
using test::ScopedEnv;

TEST(KernelRegistry, SelectsTheFirstThatAcceptsAndRecordsRefusals) {
  const Registry r = make_registry();
  auto s = r.select(context(), FakeConfig{5}, "a size-5 layer");
  EXPECT_EQ(s.name, "small");
  EXPECT_EQ(s.kernel->name(), "small");
  EXPECT_FALSE(s.forced);
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].kernel, "gpu_only");
  EXPECT_EQ(s.refusals[0].reason, "gpu_only needs a GPU");

  s = r.select(context(), FakeConfig{50}, "a size-50 layer");
  EXPECT_EQ(s.name, "any");
  ASSERT_EQ(s.refusals.size(), 2u);
  EXPECT_EQ(s.refusals[1].kernel, "small");
  EXPECT_EQ(s.refusals[1].reason, "small serves sizes up to 10");
}

TEST(KernelRegistry, FilterPassesOverAcceptableStrategies) {
  const Registry r = make_registry();
  auto s = r.select(context(), FakeConfig{5}, "a layer",
                    [](const FakeKernel& k) { return k.name() == "small" ? Verdict::no("not for decode") : Verdict::yes(); });
  EXPECT_EQ(s.name, "any");
  ASSERT_EQ(s.refusals.size(), 2u);
  EXPECT_EQ(s.refusals[1].reason, "not for decode");
}

TEST(KernelRegistry, NoStrategyIsAnErrorWithEveryReason) {
  Registry r("fake", "FP4CL_FAKE_KERNEL");
  r.add("gpu_only", [] { return std::make_unique<FakeKernel>("gpu_only", false, 1000); });
  r.add("small", [] { return std::make_unique<FakeKernel>("small", true, 10); });
  const std::string e = error_of([&] { r.select(context(), FakeConfig{50}, "a size-50 layer"); });
  EXPECT_NE(e.find("no fake kernel can serve a size-50 layer"), std::string::npos) << e;
  EXPECT_NE(e.find("gpu_only: gpu_only needs a GPU"), std::string::npos) << e;
  EXPECT_NE(e.find("small: small serves sizes up to 10"), std::string::npos) << e;
}

TEST(KernelRegistry, ForcedByName) {
  const Registry r = make_registry();
  auto s = r.create("any", context(), FakeConfig{5}, "a layer");
  EXPECT_EQ(s.name, "any");
  EXPECT_TRUE(s.forced);
  // Forced strategies still must run on the device and serve the layer.
  std::string e = error_of([&] { r.create("gpu_only", context(), FakeConfig{5}, "a layer"); });
  EXPECT_NE(e.find("does not run on"), std::string::npos) << e;
  EXPECT_NE(e.find("gpu_only needs a GPU"), std::string::npos) << e;
  e = error_of([&] { r.create("small", context(), FakeConfig{50}, "a size-50 layer"); });
  EXPECT_NE(e.find("cannot serve a size-50 layer: small serves sizes up to 10"), std::string::npos) << e;
}

TEST(KernelRegistry, UnknownNameListsTheValidOnes) {
  const Registry r = make_registry();
  const std::string e = error_of([&] { r.create("fastest", context(), FakeConfig{5}, "a layer"); });
  EXPECT_NE(e.find("unknown fake kernel 'fastest'"), std::string::npos) << e;
  EXPECT_NE(e.find("valid names: gpu_only, small, any"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { r.instantiate("fastest"); }).find("valid names: gpu_only, small, any"), std::string::npos);
}

TEST(KernelRegistry, EnvironmentForcesUnlessTheCallerNamesOne) {
  const Registry r = make_registry();
  {
    ScopedEnv env("FP4CL_FAKE_KERNEL", std::nullopt);
    EXPECT_EQ(r.forced_name(""), "");
    EXPECT_EQ(r.forced_name("small"), "small");
  }
  {
    ScopedEnv env("FP4CL_FAKE_KERNEL", "any");
    EXPECT_EQ(r.forced_name(""), "any");
    EXPECT_EQ(r.forced_name("small"), "small");
  }
}

TEST(KernelRegistry, DuplicateNamesAreRefused) {
  Registry r = make_registry();
  const std::string e = error_of([&] { r.add("small", [] { return std::make_unique<FakeKernel>("x", true, 1); }); });
  EXPECT_NE(e.find("'small' is registered twice"), std::string::npos) << e;
  EXPECT_EQ(r.names(), (std::vector<std::string>{"gpu_only", "small", "any"}));
}

}  // namespace
}  // namespace fp4cl
