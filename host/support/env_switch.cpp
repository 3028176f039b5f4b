#include "support/env_switch.hpp"

#include <algorithm>
#include <cstdlib>

#include "support/check.hpp"

namespace fp4cl {

std::string env_switch(const char* name, std::initializer_list<std::string_view> allowed, std::string_view expected) {
  const char* env = std::getenv(name);
  const std::string choice = env ? env : "";
  if (!choice.empty() && std::find(allowed.begin(), allowed.end(), choice) == allowed.end())
    fail("{} = '{}': expected {}", name, choice, expected);
  return choice;
}

}  // namespace fp4cl
