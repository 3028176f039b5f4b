#include "checkpoint/portable_math.hpp"

#include <cmath>
#include <limits>

namespace fp4cl::detail {

namespace {
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: k·kLn2Hi is exact
constexpr double kLn2Lo = 1.90821492927058770002e-10;
}  // namespace

double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m·2^e, m in [0.5, 1): exact
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    e -= 1;
  }
  const double num = m - 1.0;  // exact (Sterbenz)
  const double den = m + 1.0;
  const double t = num / den;
  const double t2 = t * t;
  double p = 1.0 / 21.0;
  for (int k = 19; k >= 1; k -= 2) {
    const double q = p * t2;
    p = q + 1.0 / static_cast<double>(k);
  }
  const double two_t = 2.0 * t;
  const double ln_m = two_t * p;
  const double de = static_cast<double>(e);
  const double lo = de * kLn2Lo;
  const double small = ln_m + lo;
  const double hi = de * kLn2Hi;
  return hi + small;
}

double portable_exp(double x) {
  if (x > 709.78) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  const double scaled = x * 1.44269504088896338700;  // 1/ln 2
  const double k = std::floor(scaled + 0.5);
  const double khi = k * kLn2Hi;
  const double klo = k * kLn2Lo;
  const double r0 = x - khi;
  const double r = r0 - klo;
  double p = 1.0;
  for (int j = 13; j >= 1; --j) {
    const double rj = r / static_cast<double>(j);
    const double q = rj * p;
    p = 1.0 + q;
  }
  return std::ldexp(p, static_cast<int>(k));
}

}  // namespace fp4cl::detail
