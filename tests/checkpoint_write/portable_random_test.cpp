// The portable generator and math behind the synthetic models: the published reference outputs
// of SplitMix64 and xoshiro256**, accuracy of portable_log/portable_exp, and the distribution.
#include "checkpoint/portable_random.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "checkpoint/portable_math.hpp"
#include "fp4cl/error.hpp"

namespace fp4cl::detail {
namespace {

// Vigna's splitmix64.c from state 0 (also java.util.SplittableRandom's test values).
TEST(PortableRandom, SplitMix64MatchesTheReferenceOutputs) {
  std::uint64_t state = 0;
  EXPECT_EQ(splitmix64_next(state), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64_next(state), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64_next(state), 0x06c45d188009454full);
}

// xoshiro256starstar.c from state {1, 2, 3, 4} (the rand_xoshiro crate's reference test).
TEST(PortableRandom, Xoshiro256StarStarMatchesTheReferenceOutputs) {
  PortableRandom r = PortableRandom::with_state(1, 2, 3, 4);
  const std::uint64_t expected[] = {11520ull,
                                    0ull,
                                    1509978240ull,
                                    1215971899390074240ull,
                                    1216172134540287360ull,
                                    607988272756665600ull,
                                    16172922978634559625ull,
                                    8476171486693032832ull,
                                    10595114339597558777ull,
                                    2904607092377533576ull};
  for (const std::uint64_t e : expected) EXPECT_EQ(r.next(), e);
  EXPECT_THROW(PortableRandom::with_state(0, 0, 0, 0), Error);
}

TEST(PortableRandom, Fnv1aMatchesTheReferenceOutputs) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(PortableRandom, NamedStreamsAreReproducibleAndIndependent) {
  PortableRandom a(7, "model.norm.weight"), b(7, "model.norm.weight"), c(7, "lm_head.weight"),
      d(8, "model.norm.weight");
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    same_c += x == c.next();
    same_d += x == d.next();
  }
  EXPECT_EQ(same_c, 0);
  EXPECT_EQ(same_d, 0);
}

TEST(PortableRandom, UniformAndNormalHaveTheirDistributions) {
  PortableRandom r(123);
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0, umin = 1, umax = 0;
  int beyond3 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    usum += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    const double z = r.normal();
    sum += z;
    sum2 += z * z;
    beyond3 += std::fabs(z) > 3.0;
  }
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
  EXPECT_NEAR(usum / n, 0.5, 0.005);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.01);
  // P(|z| > 3) = 0.0027 for a standard normal.
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0027, 0.0006);
}

double ulps_apart(double a, double b) {
  return std::fabs(a - b) /
         (std::nextafter(std::fabs(b), std::numeric_limits<double>::infinity()) - std::fabs(b));
}

TEST(PortableMath, LogIsAccurateToAFewUlp) {
  EXPECT_EQ(portable_log(1.0), 0.0);
  PortableRandom r(5);
  for (int i = 0; i < 100000; ++i) {
    const double x = std::ldexp(0.5 + r.uniform(), static_cast<int>(r.next() % 200) - 100);
    const double want = std::log(x);
    EXPECT_LE(ulps_apart(portable_log(x), want), 4.0) << "x = " << x;
  }
  for (const double x : {std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(),
                         1e-300, std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0), 2.0, 0.5, 1e300,
                         std::numeric_limits<double>::max()}) {
    EXPECT_LE(ulps_apart(portable_log(x), std::log(x)), 4.0) << "x = " << x;
  }
}

TEST(PortableMath, ExpIsAccurateToAFewUlp) {
  EXPECT_EQ(portable_exp(0.0), 1.0);
  PortableRandom r(6);
  for (int i = 0; i < 100000; ++i) {
    const double x = (r.uniform() - 0.5) * 1400.0;
    EXPECT_LE(ulps_apart(portable_exp(x), std::exp(x)), 4.0) << "x = " << x;
  }
  EXPECT_EQ(portable_exp(800.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(portable_exp(-800.0), 0.0);
}

}  // namespace
}  // namespace fp4cl::detail
