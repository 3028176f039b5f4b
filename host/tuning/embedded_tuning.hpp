// The tuning databases shipped in the repository (tuning/*.json), embedded at build time by
// cmake/EmbedTuning.cmake.
#pragma once

#include <string_view>
#include <vector>

namespace fp4cl::tuning {

struct EmbeddedDatabase {
  std::string_view name;  // "tuning/pocl-cpu.json"
  std::string_view text;
};

const std::vector<EmbeddedDatabase>& embedded_databases();

}  // namespace fp4cl::tuning
