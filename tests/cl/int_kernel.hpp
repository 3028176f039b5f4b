// Runs a test kernel whose first argument is a __global int* output and returns that output.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "fp4cl/context.hpp"

namespace fp4cl::test {

// Runs `kernel(out, args...)` over `n` work-items on `ctx`'s queue and returns `out` (n ints,
// -1 where the kernel wrote nothing). Failures are reported as test failures.
template <typename... Args>
std::vector<cl_int> run_int_kernel(const Context& ctx, cl::Kernel kernel, std::size_t n, Args... args) {
  std::vector<cl_int> host(n, -1);
  cl_int err = CL_SUCCESS;
  cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof(cl_int), host.data(),
                 &err);
  EXPECT_EQ(err, CL_SUCCESS);
  if (err != CL_SUCCESS) return host;
  EXPECT_EQ(kernel.setArg(0, out), CL_SUCCESS);
  cl_uint index = 1;
  const cl_int arg_status[] = {CL_SUCCESS, kernel.setArg(index++, args)...};
  for (const cl_int status : arg_status) EXPECT_EQ(status, CL_SUCCESS);
  EXPECT_EQ(ctx.queue().enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(n)), CL_SUCCESS);
  EXPECT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * sizeof(cl_int), host.data()), CL_SUCCESS);
  return host;
}

}  // namespace fp4cl::test
