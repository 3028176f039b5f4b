// The candidates of the MoE tuner (tune_moe.cpp): which strategies it tunes on a device, which
// parameters it searches for each at a token bucket, where the search starts, how a candidate
// reaches the layer (FP4CL_MOE_TILES) and why the layer refuses one.
//
//   grouped, decode, split  local_i and local_h (and tile_m, not for decode); at the first bucket
//                           also the weight layout (vec, group), which the layer then holds
//   mma, few pairs          buckets whose chunks take mma's tiles for few pairs (T·k below
//                           5/16 of tile_m pairs per expert, mma_few_pairs_tiles): few_split_k
//                           {0 (automatic), 1, 2, 4, 8} × unroll {1, 2, 4, 8}
//   mma, many pairs         tile_m {8, 16, 32, 64}, local_i and local_h {32, 64, 128, 256},
//                           split_k {0 (automatic), 1, 2, 4}, stage {0, 1} (activations staged
//                           in local memory where a work-group has several row tiles), warp_tiles
//                           {1, 2, 4} (row tiles a warp); few_split_k and unroll held at what the
//                           first few-pairs bucket found (the values a layer's one set of tiles
//                           takes: batch invariance, FP4CL_MOE_TILES)
//
// Candidates the layer refuses (mma_tiles_refusal and the like) are found without building a
// kernel, logged and skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "kernels/moe_registry.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning_search.hpp"

namespace fp4cl::bench {

// Sets FP4CL_MOE_TILES for the lifetime of the object and restores it after (the tuner is
// single-threaded).
class ScopedTiles {
 public:
  explicit ScopedTiles(const std::string& value);
  ~ScopedTiles();
  ScopedTiles(const ScopedTiles&) = delete;
  ScopedTiles& operator=(const ScopedTiles&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

// The strategies to tune for `problem` on `device`: `requested` (each must be a strategy name;
// fp4cl::Error otherwise), or when it is empty those automatic selection can choose there:
// decode and grouped; split on GPUs; mma where it runs natively (NVIDIA, compute capability 8.0
// or more) and its built-in tiles serve the problem, and grouped then not (mma serves every
// chunk grouped would).
std::vector<std::string> moe_tune_strategies(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                             const std::vector<std::string>& requested);

// Whether a chunk of `tokens` tokens takes mma's tiles for few pairs with tiles of `tile_m`
// pairs (mma_few_pairs_chunk): T·k below 5/16 of tile_m pairs per expert.
bool mma_few_pairs_bucket(std::int64_t tokens, int top_k, std::int64_t experts, long long tile_m);

// The parameters searched for `strategy` at one bucket. `with_layout`: search vec and group too
// (not for mma, which has its own weight layout); `few_pairs`: mma's bucket takes the tiles for
// few pairs; `routed`: its chunks are routed ones as well (mma_routed_bucket), whose FC1's row
// tiles and blocks of rows a work-group are searched too, and under W4A4
// (`quantized_activations`) its row tiles a warp.
std::vector<ParamAxis> moe_axes(const std::string& strategy, bool with_layout, bool few_pairs, DeviceKind kind,
                                bool routed = false, bool quantized_activations = false);
// Whether mma's chunks of `tokens` tokens are routed ones (FC1 and FC2 find their tiles
// themselves): more than one token, few pairs, at most kMmaRoutedPairs pairs.
bool mma_routed_bucket(std::int64_t tokens, int top_k, bool few_pairs);

// The layer's built-in choice for `strategy` (FP4CL_MOE_TILES unset, no tuning database): vec,
// group, tile_m, local_i, local_h, and for mma split_k, few_split_k, unroll, stage and warp_tiles.
tuning::Params moe_default_params(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                  const std::string& strategy);

// The FP4CL_MOE_TILES value of a candidate for `strategy` ("vec=1,group=64,mma.tile_m=16,...").
std::string moe_tiles_env(const std::string& strategy, const tuning::Params& params);

// "" when the layer builds `strategy` with `params` for `problem` on `device`, else why not (the
// message of select_moe_strategies). Builds nothing.
std::string moe_candidate_refusal(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                  const std::string& strategy, const tuning::Params& params);

}  // namespace fp4cl::bench
