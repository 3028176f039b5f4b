// Kernel files held in memory, for tests that build their own small programs through the same
// path the library's embedded kernels take (include resolution, caches) without adding test
// kernels to the library.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fp4cl/program_cache.hpp"

namespace fp4cl::test {

inline KernelSources memory_sources(std::map<std::string, std::string> files) {
  auto table = std::make_shared<const std::map<std::string, std::string>>(std::move(files));
  return [table](std::string_view path) -> std::optional<std::string_view> {
    const auto it = table->find(std::string(path));
    if (it == table->end()) return std::nullopt;
    return std::string_view(it->second);
  };
}

}  // namespace fp4cl::test
