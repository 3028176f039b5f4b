// The library's environment switches (FP4CL_W4A16_INT, FP4CL_LINEAR_AVX2, FP4CL_MOE_INT_DOT, ...):
// one reading and one error for all of them.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace fp4cl {

// The value of the environment variable `name`: "" where it is unset or empty, else one of
// `allowed`; any other value is an fp4cl::Error "NAME = 'VALUE': expected EXPECTED".
std::string env_switch(const char* name, std::initializer_list<std::string_view> allowed, std::string_view expected);

}  // namespace fp4cl
