// OpenCL status names and the one exception type.
#include <gtest/gtest.h>

#include "fp4cl/error.hpp"
#include "fp4cl/opencl.hpp"
#include "support/check.hpp"

namespace fp4cl {
namespace {

TEST(StatusName, NamesCoreCodes) {
  EXPECT_EQ(cl_status_name(CL_SUCCESS), "CL_SUCCESS");
  EXPECT_EQ(cl_status_name(CL_DEVICE_NOT_FOUND), "CL_DEVICE_NOT_FOUND");
  EXPECT_EQ(cl_status_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
  EXPECT_EQ(cl_status_name(CL_BUILD_PROGRAM_FAILURE), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(cl_status_name(CL_INVALID_KERNEL_NAME), "CL_INVALID_KERNEL_NAME");
  EXPECT_EQ(cl_status_name(CL_INVALID_DEVICE_PARTITION_COUNT), "CL_INVALID_DEVICE_PARTITION_COUNT");
}

TEST(StatusName, NamesCodesBeyondTheOpenCL12Headers) {
  EXPECT_EQ(cl_status_name(-72), "CL_MAX_SIZE_RESTRICTION_EXCEEDED");
  EXPECT_EQ(cl_status_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
}

TEST(StatusName, UnknownCodesCarryTheirNumber) {
  EXPECT_EQ(cl_status_name(-20), "CL_UNKNOWN_ERROR(-20)");  // a gap between the 1.2 codes
  EXPECT_EQ(cl_status_name(-9999), "CL_UNKNOWN_ERROR(-9999)");
  EXPECT_EQ(cl_status_name(5), "CL_UNKNOWN_ERROR(5)");
}

TEST(CheckCl, SuccessDoesNotThrow) { EXPECT_NO_THROW(check_cl(CL_SUCCESS, "doing {}", "nothing")); }

TEST(CheckCl, FailureThrowsErrorWithWhatNameAndCode) {
  try {
    check_cl(CL_INVALID_BUFFER_SIZE, "allocating the {} buffer", "scales");
    FAIL() << "check_cl did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.cl_status(), CL_INVALID_BUFFER_SIZE);
    EXPECT_STREQ(e.what(), "allocating the scales buffer: CL_INVALID_BUFFER_SIZE (-61)");
  }
}

TEST(Fail, ThrowsErrorWithoutStatus) {
  try {
    fail("tensor {} has {} dimensions, expected 2", "w13", 3);
    FAIL() << "fail did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.cl_status(), CL_SUCCESS);
    EXPECT_STREQ(e.what(), "tensor w13 has 3 dimensions, expected 2");
  }
}

}  // namespace
}  // namespace fp4cl
