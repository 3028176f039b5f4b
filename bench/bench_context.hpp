// The OpenCL context of a benchmark run: the device chosen by fp4cl-bench's --device option,
// else FP4CL_DEVICE, else the default device (fp4cl::Context::create).
#pragma once

#include <string>

#include "fp4cl/context.hpp"

namespace fp4cl::bench {

// Set by main from --device before a subcommand runs ("" = FP4CL_DEVICE / default).
void set_device_selector(const std::string& selector);
const std::string& device_selector();

Context bench_context();

}  // namespace fp4cl::bench
