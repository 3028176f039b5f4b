// The expert-parallel map of an MoE layer (FP4.md §6): global expert id -> local expert or -1.
// Pure host code, shared by the layer and the scalar reference so both accept the same maps.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4cl {

// Returns the map to use: the identity over `num_local` experts when `map` is empty, else `map`
// after checking that every entry is -1 or a local id in [0, num_local) and that no local id is
// named twice. Throws fp4cl::Error naming the first offending entry.
std::vector<std::int32_t> resolve_expert_map(const std::vector<std::int32_t>& map, std::int64_t num_local);

}  // namespace fp4cl
