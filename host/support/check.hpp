// Helpers that turn failures into fp4cl::Error with a formatted message.
#pragma once

#include <fmt/format.h>

#include <utility>

#include "fp4cl/error.hpp"

namespace fp4cl {

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Throws fp4cl::Error "<what>: CL_NAME (code)" when `status` is not CL_SUCCESS.
template <typename... Args>
void check_cl(int status, fmt::format_string<Args...> what, Args&&... args) {
  if (status != 0) {
    throw Error(fmt::format("{}: {} ({})", fmt::format(what, std::forward<Args>(args)...),
                            cl_status_name(status), status),
                status);
  }
}

}  // namespace fp4cl
