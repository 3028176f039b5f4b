// The tuning database's entries for an MoE layer, turned into the parameter vocabulary of the MoE
// strategies (kernels/moe_registry.hpp, the keys of FP4CL_MOE_TILES):
//   vec, group                       the weight layout, shared by both strategies
//   decode.<tile_m|local_i|local_h>  from the smallest tuned bucket that `decode` won
//   grouped.<tile_m|local_i|local_h> from the largest tuned bucket that `grouped` won (the
//                                    smaller ones' serve their own counts:
//                                    MoeTuned::grouped)
//   split.<tile_m|local_i|local_h>   from the smallest tuned bucket that `split` won
//   split_max_pairs                  (only when `split` won a bucket) the last token count of the
//                                    last split bucket before the first bucket another won × k
//   mma.<tile_m|local_i|local_h|split_k|stage|warp_tiles>  from the largest tuned bucket that `mma` won (the tiles
//                                    of chunks with many pairs per expert)
//   mma.<few_split_k|unroll|fc2_unroll|routed_row_tiles|routed_row_loop|routed_warp_tiles|
//       token_fc2_warp_tiles>        from the smallest tuned bucket that `mma` won (chunks with few pairs:
//                                    mma_few_pairs_tiles, and routed ones); with the line above, the
//                                    one set of a layer that takes one (batch invariance) and the
//                                    set of calls larger than mma's largest bucket (the smaller
//                                    ones' serve their own counts: MoeTuned::mma)
//   decode_max_pairs                 where the buckets switch from decode to grouped or mma: the
//                                    last token count of the last decode bucket × k (the
//                                    nearest-bucket rule of tuning_lookup.hpp); 0 when decode won
//                                    no bucket
// An entry's params use the keys vec, group, tile_m, local_i, local_h, and for `mma` also
// split_k, few_split_k (0: automatic), unroll, fc2_unroll (0: unroll's), stage, warp_tiles,
// routed_row_tiles, routed_row_loop, routed_warp_tiles and token_fc2_warp_tiles (0: automatic). A
// value outside a key's range (mma's tile_m, unroll and its other keys of a few values:
// kernels/mma_tile_values.hpp, those marked tuned; tile_m of the others 1, 2, 4 or 8; split_k 0
// to 64), a key the strategy does not have or an unknown strategy sets the layer's entries aside,
// with a warning. A bucket may be any token count (usually a power of two).
// Other buckets decode or split won set crossovers but no tiles; an info line (once a process)
// names them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "fp4cl/scheme.hpp"
#include "tuning/tuning_lookup.hpp"

namespace fp4cl::tuning {

struct MoeShapeKey {
  QuantScheme scheme;
  std::int64_t hidden = 0, inter = 0, experts = 0;
  int top_k = 1;
};

// The database key of an MoE layer: op "moe", its scheme, hidden, inter, experts and topk.
LookupKey moe_lookup_key(const MoeShapeKey& key);

// A bucket `grouped` or `mma` won, as the tiles it gives calls of up to last_tokens tokens.
struct MoeBucket {
  std::int64_t tokens = 0;
  std::int64_t last_tokens = 0;
  // Those the entry gives of tile_m, local_i, local_h and for mma split_k, few_split_k, unroll,
  // fc2_unroll, stage, warp_tiles, routed_row_tiles, routed_row_loop, routed_warp_tiles,
  // token_fc2_warp_tiles (without the strategy's prefix).
  std::map<std::string, int> tiles;
  std::string origin;  // the database file the entry came from
};

// What the process-wide tuning store holds for the layer on the device, from one lookup; both
// empty when the database has no entry for it, or (with a warning) when its entries are not
// usable.
//   overrides  the keys above
//   grouped    every bucket `grouped` won, by increasing bucket, each serving the calls of up to
//              last_tokens tokens (the nearest-bucket rule among grouped's buckets: bucket 8
//              beside 512 serves up to 64 tokens; the largest every larger count). A layer runs
//              each call with its bucket's tiles (select_moe_strategies), not only the largest's:
//              on PoCL, 2 AVX-512 cores, qwen3-30b-a3b W4A16 at 64 tokens took 48-50 ms with the
//              512-token tiles against 42.6-44.8 with the 8-token ones. Each set is built with the
//              layer (creating qwen3-30b-a3b W4A4 with 3 sets took 3.3 s more on that CPU with an
//              empty program cache, 1.4 s more with a warm one, for 3 layer copies).
//   mma        the same for every bucket `mma` won. Tiles that suit one token count do not suit
//              another: on an H200, mixtral-8x7b NVFP4 W4A4 took 1843 µs at T = 512 with tiles of
//              64 pairs and 2 row tiles a warp against 2157 with the built-in ones, but 729
//              against 510 at T = 64; and the few-pairs K split that suits one token (8 warps on
//              an H100) splits FC2's K six ways at T = 8.
struct MoeTuned {
  std::map<std::string, int> overrides;
  // Per strategy whose tiles `overrides` sets, the database files its one set came from, in
  // bucket order ("A", or "A, B" when mma's few-pairs values and many-pairs tiles come from two
  // files); no entry for the others.
  std::map<std::string, std::string> tiles_origin;
  std::vector<MoeBucket> grouped;
  std::vector<MoeBucket> mma;
};
MoeTuned moe_tuned(const DeviceInfo& device, const MoeShapeKey& key);

}  // namespace fp4cl::tuning
