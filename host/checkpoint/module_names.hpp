// Ordering and grouping module names the way people read them: numbers as numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4cl::detail {

// "model.layers.2.x" < "model.layers.10.x": runs of digits compare by value (then by length, so
// "01" and "1" stay distinct), everything else byte by byte.
bool natural_less(std::string_view a, std::string_view b);

// A module name with its first all-digit component taken out: "model.layers.12.mlp.experts" is
// {"model.layers.{}.mlp.experts", 12}. Names without one (or with a number of more than 9
// digits) are their own pattern, without a number.
struct NumberedName {
  std::string pattern;  // the name with "{}" in place of the number
  std::optional<std::int64_t> number;
};
NumberedName split_layer_number(std::string_view name);

// The module `sibling` beside an MoE layer's experts container: ("model.layers.3.mlp.experts",
// "shared_experts") is "model.layers.3.mlp.shared_experts"; a container without a dot gives
// `sibling` itself.
std::string beside_experts(std::string_view experts_container, std::string_view sibling);

}  // namespace fp4cl::detail
