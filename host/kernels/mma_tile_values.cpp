#include "kernels/mma_tile_values.hpp"

#include <fmt/format.h>

#include <iterator>

namespace fp4cl {

std::string mma_tile_values_text(const MmaTileKey& key) {
  std::string s;
  for (const MmaTileValue* v = key.values.begin(); v != key.values.end(); ++v) {
    if (v != key.values.begin()) s += std::next(v) == key.values.end() ? " or " : ", ";
    s += v->meaning ? fmt::format("{} ({})", v->value, v->meaning) : fmt::format("{}", v->value);
  }
  if (key.meaning) s += fmt::format(" ({})", key.meaning);
  return s;
}

}  // namespace fp4cl
