// The mma strategy's tile keys of a few values each (MoeTiles' fields of those names): their
// values and what they mean, written once. mma_tiles_refusal (moe_registry.cpp) refuses any other
// value with this text, in this order; FP4CL_MOE_TILES takes 0 for a key where it is one of them;
// the tuning database's mma entries may hold these values of the keys marked `tuned`
// (moe_tuning.cpp). The other mma keys (tile sizes, K splits) are checked by the geometry they
// give.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "kernels/moe_registry.hpp"

namespace fp4cl {

struct MmaTileValue {
  int value = 0;
  const char* meaning = nullptr;  // said after the value where the key's meaning does not cover it
};

// A key's values, at most 5, in the order its refusal lists them.
class MmaTileValues {
 public:
  constexpr MmaTileValues(std::initializer_list<MmaTileValue> values) {
    for (const MmaTileValue& v : values) values_[count_++] = v;
  }
  constexpr const MmaTileValue* begin() const { return values_; }
  constexpr const MmaTileValue* end() const { return values_ + count_; }

 private:
  MmaTileValue values_[5] = {};
  int count_ = 0;
};

struct MmaTileKey {
  const char* name;  // the field, FP4CL_MOE_TILES's key after "mma.", the database's parameter
  int MoeTiles::*field;
  MmaTileValues values;
  const char* meaning;  // said after the values (nullptr: each value says its own)
  bool tuned;           // whether the tuning database's mma entries may set it

  constexpr bool takes(long long v) const {
    for (const MmaTileValue& x : values)
      if (x.value == v) return true;
    return false;
  }
};

inline constexpr MmaTileKey kMmaTileKeys[] = {
    {"tile_m", &MoeTiles::tile_m, {{8}, {16}, {32}, {64}}, "MMAs of 8 tokens", true},
    {"unroll", &MoeTiles::unroll, {{1}, {2}, {4}, {8}}, "chunks a warp loads ahead", true},
    {"fc2_unroll", &MoeTiles::fc2_unroll, {{0, "unroll's"}, {1}, {2}, {4}, {8}}, "chunks an FC2 warp loads ahead",
     true},
    {"row_loop", &MoeTiles::row_loop, {{0, "automatic"}, {1}, {2}, {4}, {8}}, "FC1 row blocks a work-group takes",
     false},
    {"stage", &MoeTiles::stage, {{0, "each warp reads the activations"}, {1, "staged in local memory"}}, nullptr, true},
    {"warp_tiles", &MoeTiles::warp_tiles, {{1}, {2}, {4}}, "row tiles of 16 a warp", true},
    {"routed_warp_tiles", &MoeTiles::routed_warp_tiles, {{0, "automatic"}, {1}, {2}, {4}},
     "row tiles of 16 a warp of the routed W4A4 FC1", true},
    {"routed_row_tiles", &MoeTiles::routed_row_tiles, {{0, "automatic"}, {1}, {2}, {4}},
     "row tiles of 16 a work-group of the routed FC1", true},
    {"routed_row_loop", &MoeTiles::routed_row_loop, {{0, "automatic"}, {1}, {2}, {4}, {8}},
     "blocks of rows a work-group of the routed FC1 takes", true},
    {"routed_fc2", &MoeTiles::routed_fc2,
     {{0, "automatic"}, {1, "a work-group a tile of pairs"}, {2, "a work-group a token"}}, nullptr, false},
    {"token_fc2_warp_tiles", &MoeTiles::token_fc2_warp_tiles, {{0, "automatic"}, {1}, {2}, {4}},
     "row tiles of 16 a warp of the routed chunks' FC2 of a work-group a token", true},
    {"route_logits", &MoeTiles::route_logits,
     {{0, "automatic: FC1 for one token and small routed chunks"},
      {1, "the router kernel"},
      {2, "FC1 for one token and every routed chunk"}},
     nullptr, false},
};

// The key of that name ("unroll"), nullptr for the others.
constexpr const MmaTileKey* mma_tile_key(std::string_view name) {
  for (const MmaTileKey& key : kMmaTileKeys)
    if (name == key.name) return &key;
  return nullptr;
}

// "0 (automatic), 1, 2 or 4 (row tiles of 16 a warp of the routed W4A4 FC1)": what a refusal says
// the key must be.
std::string mma_tile_values_text(const MmaTileKey& key);

}  // namespace fp4cl
