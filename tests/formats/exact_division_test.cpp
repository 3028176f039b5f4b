// The one helper that chooses how kernels get IEEE fp32 division.
#include <gtest/gtest.h>

#include <string>

#include "cl/exact_division.hpp"
#include "fp4cl/error.hpp"

namespace fp4cl {
namespace {

DeviceInfo device(bool correctly_rounded_divide, bool fp64) {
  DeviceInfo info;
  info.name = "test device";
  info.correctly_rounded_divide = correctly_rounded_divide;
  info.has_fp64 = fp64;
  return info;
}

TEST(ExactDivision, PrefersCorrectlyRoundedDivision) {
  BuildOptions options;
  add_exact_division(options, device(true, true), "k.cl");
  EXPECT_EQ(options.str(), "-cl-fp32-correctly-rounded-divide-sqrt");
}

TEST(ExactDivision, FallsBackToFp64) {
  BuildOptions options;
  add_exact_division(options, device(false, true), "k.cl");
  EXPECT_EQ(options.str(), "-DFP4CL_DIV_VIA_FP64=1");
}

TEST(ExactDivision, RefusesADeviceWithNeither) {
  BuildOptions options;
  try {
    add_exact_division(options, device(false, false), "quantize.cl");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("quantize.cl"), std::string::npos) << what;
    EXPECT_NE(what.find("test device"), std::string::npos) << what;
    EXPECT_NE(what.find("CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace fp4cl
