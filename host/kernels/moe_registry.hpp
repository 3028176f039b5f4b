// The MoE kernel strategies and how a layer chooses among them. Each strategy says for itself
// whether it can serve a layer on a device (and why not); selection logs every refusal.
//
//   grouped  pairs sorted by expert into tiles of MOE_TILE_M; every weight row is streamed once
//            per tile and reused across its pairs (many tokens).
//   decode   one pair per tile, FC2 fused with the top-k sum: each (token, expert) pair streams
//            its expert's weights once and nothing else is launched for the reduction (few tokens).
//   split    (GPUs) every row split over many work-items of a work-group, one work-group per
//            (row tile, pair) in FC1 and per (row tile, token) in FC2 with the top-k sum; no sort,
//            no gather: route, FC1, FC2 (kernels/moe_split.cl, its own weight layout).
//   mma      grouped's pipeline with FC1 and FC2 on tensor cores (kernels/moe_mma.cl: BF16
//            m16n8k16 MMAs through inline PTX, its own weight layout): chosen automatically on
//            NVIDIA devices of compute capability 8.0 or more for the chunks split does not take;
//            elsewhere only when forced (a portable emulation, for tests).
//
// FP4CL_MOE_KERNEL (or MoeConfig::kernel) forces one strategy for every call; otherwise a chunk
// of T tokens runs `split` when T·k <= split_max_pairs (GPU devices only, by default
// min(512, 2·E_local): CPUs never build it unless it is forced or split_max_pairs is set), else
// `decode` when T·k <= decode_max_pairs (by default 64 on GPUs, min(16, E_local) on CPUs), else
// `mma` where it is built, else `grouped`. Where mma is built (NVIDIA, compute capability >= 8.0)
// the defaults change: split_max_pairs = 0 (split is not built) and decode_max_pairs = 0, unless
// the tuning database or FP4CL_MOE_TILES set them.
// FP4CL_MOE_TILES="vec=1,group=64,grouped.tile_m=4,decode.local_h=4,decode_max_pairs=64"
// overrides the defaults of the layout, the tiles and the crossovers (for tuning; an unknown key
// or a value the device refuses is an error). For `split`, tile_m is the FC1 rows per lane group,
// local_i the FC1 work-group size and local_h the FC2 work-group size budget (SplitGeometry); for
// `mma`, tile_m is the pairs a tile (8, 16, 32 or 64), local_i and local_h the FC1 and FC2
// work-group sizes (MmaGeometry), and mma.split_k / mma.few_split_k may be 0 (the automatic K
// split, mma_auto_split_k). Between the two, the tuning database's entries for
// the layer apply (host/tuning/moe_tuning.hpp): built-in defaults < database < FP4CL_MOE_TILES,
// key by key and in each tuned bucket (a key the variable sets wins in every bucket; the others
// stay the bucket's); tuned tiles a strategy refuses on the device give way to its built-in ones,
// with a warning.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "fp4cl/program_cache.hpp"
#include "fp4cl/scheme.hpp"
#include "prepare/fp4_split_layout.hpp"  // split_lanes

namespace fp4cl {

enum class MoeStrategy { grouped, decode, split, mma };

// The weight layout of a layer on a device (kernels/moe_fp4_vec.cl), passed as -D defines.
struct MoeLayout {
  int vec = 1;    // MOE_VEC: rows per work-item, as vector lanes (the device's float width)
  int group = 1;  // MOE_GROUP: rows whose words are interleaved (a multiple of vec)
};

// The tile parameters of a strategy, passed to the kernels as -D defines.
struct MoeTiles {
  int tile_m = 1;    // MOE_TILE_M: pairs of one expert that share each weight read
  int local_i = 1;   // MOE_LOCAL of moe_fc1.cl: work-items per group (each vec rows of I)
  int local_h = 1;   // MOE_LOCAL of moe_fc2.cl: work-items per group (each vec rows of H)
  int split_k = 1;   // mma: warps splitting K in a work-group (the rest of local_i / local_h are row tiles)
  int few_split_k = 0;  // mma: the same for chunks of few pairs per expert (0: mma_auto_split_k); not for
                        // routed chunks' FC2 of a work-group a token (routed_fc2: none, unless batch invariant)
  int unroll = 1;       // mma: chunks of 64 weights a warp loads before their MMAs (unstaged K loops)
  int fc2_unroll = 0;   // mma: the same for FC2's warps alone (0: unroll)
  int row_loop = 0;     // mma, one token under W4A4: FC1 row blocks a work-group takes (0: mma_pair_row_loop)
  int stage = 0;  // mma: 1 = a work-group's row tiles share activations staged in local memory; 0 = each warp reads them
  int warp_tiles = 1;  // mma, many pairs: row tiles of 16 a warp multiplies, each B fragment serving them all
  // mma, routed chunks whose W4A4 FC1 quantizes its tiles' tokens (mma_routed_local_tile): that
  // FC1's row tiles a warp (0: automatic, 1)
  int routed_warp_tiles = 0;
  // mma, routed chunks: their FC1's row tiles of 16 a work-group (0: automatic: under W4A4 with
  // the tiles' tokens in local memory mma_routed_local_row_tiles, else the few-pairs tiles' 1),
  // each warp one of them over its K slice (the same sums in the same order: the same bits)
  int routed_row_tiles = 0;
  // mma, routed chunks: blocks of those rows each FC1 work-group multiplies after its one routing
  // (0: automatic, 1; MMA_ROW_LOOP, as the one-token W4A4 FC1's row_loop)
  int routed_row_loop = 0;
  // mma, routed chunks: their FC2's work-groups (0: mma_routed_token_fc2 per chunk; 1: one a tile
  // of pairs, the last to finish a block of rows summing the top-k; 2: one a token, summing its
  // top-k pairs itself)
  int routed_fc2 = 0;
  // mma, routed chunks whose FC2 takes a work-group a token (routed_fc2 2, or its automatic
  // choice): that FC2's row tiles of 16 a warp (0: automatic, 1), each B fragment serving them all
  // (the same sums in the same order: the same bits)
  int token_fc2_warp_tiles = 0;
  // mma, calls with router logits: which kernel routes them (0: automatic, FC1 in one-token chunks
  // and in the routed chunks that mma_fc1_routes_chunk takes, the router kernel in the others; 1:
  // the router kernel, a launch before FC1; 2: FC1 in one-token and every routed chunk, every
  // work-group routing the chunk's tokens itself). Where FC1 cannot (moe_gather_pairs reads the
  // pairs first, or its local memory does not fit the routing's), the router kernel does.
  int route_logits = 0;

  bool operator==(const MoeTiles& o) const {
    return tile_m == o.tile_m && local_i == o.local_i && local_h == o.local_h && split_k == o.split_k &&
           few_split_k == o.few_split_k && unroll == o.unroll && fc2_unroll == o.fc2_unroll &&
           row_loop == o.row_loop && stage == o.stage && warp_tiles == o.warp_tiles &&
           routed_warp_tiles == o.routed_warp_tiles &&
           routed_row_tiles == o.routed_row_tiles && routed_row_loop == o.routed_row_loop && routed_fc2 == o.routed_fc2 &&
           token_fc2_warp_tiles == o.token_fc2_warp_tiles && route_logits == o.route_logits;
  }
};

struct MoeProblem {
  QuantScheme scheme;
  std::int64_t hidden = 0, intermediate = 0, local_experts = 0;
  int top_k = 1;
};

const char* to_string(MoeStrategy s);

// The launch geometry of the split strategy (kernels/moe_split.cl) for a problem and its tiles.
struct SplitGeometry {
  int lanes1 = 1, local1 = 1, rows_per_group = 1;  // FC1: lanes per row (K = H), work-group, rows per lane group
  int lanes2 = 1, slots = 1, rows2 = 1;            // FC2: lanes per row (K = I), slot lanes, rows per work-group
  int rows1() const { return local1 / lanes1 * rows_per_group; }
  int local2() const { return lanes2 * slots * rows2; }
};
SplitGeometry split_geometry(const MoeTiles& tiles, const MoeProblem& problem);
// Pairs of one expert that one FC1 pass of the split strategy serves in chunks of several tokens
// (their tokens staged side by side in local memory, each step's activations of every pair held
// in registers): 2 where `local_mem_bytes` holds two tokens, else 1.
int split_shared_pairs(const SplitGeometry& g, const MoeProblem& problem, std::uint64_t local_mem_bytes);
// The chunk's pairs, at most, for a shared FC1 pass (SPLIT_MAX_PAIRS in moe_split.cl).
constexpr std::int64_t kSplitMaxSharedPairs = 512;

// The launch geometry of the mma strategy (kernels/moe_mma.cl): MMAs of 8 tokens per k16 step
// (tile_m / 8); per GEMM (FC1: K = H, rows I; FC2: K = I, rows H) the warps splitting K (the
// largest divisor of K / 64 up to split_k), the row tiles of 16 per work-group (up to local / 32
// / split_k: the most that divide the GEMM's rows and, in FC1 under W4A4, keep whole blocks) and
// the chunks of 64 staged per K slice at a time (4, 2 or 1: the most whose staged activations
// fit in 16 KiB), staged only where the tiles ask for it (MoeTiles::stage) and several row tiles
// share them.
// The most pairs of a chunk whose FC1 sorts them itself (MMA_ROUTE_PAIRS in moe_mma.cl: no
// moe_sort launch).
constexpr std::int64_t kMmaRoutedPairs = 64;
// Which kernel routes router logits in a routed chunk by default (MoeTiles::route_logits 0): FC1
// where the chunk has at most kMmaFc1RouteTokens tokens and at most kMmaFc1RouteLogits logits
// (tokens × global experts), else the router kernel. Every FC1 work-group routes the chunk's tokens
// one after the other before its first weight load, so that cost grows with the tokens and the
// experts while the router launch it saves does not. On the H100 (bench/gpu/h100/2026-12-05),
// NVFP4, µs, FC1 against the router kernel:
//   qwen3-30b-a3b (E = 128, softmax) T = 2 W4A16 36.6, 36.9 / 42.5, 50.2; W4A4 38.4, 38.9 / 49.7,
//     45.8; T = 4 W4A16 60.4 / 53.5, W4A4 64.0 / 60.4; T = 8 116.0 / 75.5, 123.6 / 80.4
//   mixtral-8x7b (E = 8) T = 2 182.3 / 185.6, 193.8 / 187.9 (level); T = 4 212.5 / 175.4
//   deepseek-v3 (E = 256, its gate) W4A16 T = 2 191.5 / 181.8
constexpr std::int64_t kMmaFc1RouteTokens = 2;
constexpr std::int64_t kMmaFc1RouteLogits = 256;
constexpr bool mma_fc1_routes_chunk(std::int64_t tokens, std::int64_t global_experts) {
  return tokens <= kMmaFc1RouteTokens && tokens * global_experts <= kMmaFc1RouteLogits;
}
struct MmaGemm {
  int rt = 1, ks = 1, kstage = 1;
  int mt = 1;  // row tiles a warp (MoeTiles::warp_tiles)
  bool stage = false;
  int rows() const { return 16 * rt * mt; }
  int local() const { return 32 * rt * ks; }
  // The words of the kernel's one local buffer (moe_mma.cl, MMA_LDS_WORDS) for tiles of 8·nt
  // pairs and `mats` weight matrices: the staged activations or the K slices' partial sums.
  std::uint64_t shared_words(int nt, int mats) const {
    const std::uint64_t staged = stage ? static_cast<std::uint64_t>(ks) * 8 * nt * (32 * kstage + 4) : 0u;
    const std::uint64_t part = static_cast<std::uint64_t>(ks) * rt * mt * mats * nt * 128;
    return std::max(staged, part);
  }
};
struct MmaGeometry {
  int nt = 1;
  int unroll = 1;      // MMA_UNROLL of FC1 (MoeTiles::unroll)
  int fc2_unroll = 1;  // MMA_UNROLL of FC2 (MoeTiles::fc2_unroll, else unroll)
  MmaGemm fc1, fc2;
};
// The largest divisor of n that is at most limit (at least 1): the K splits and row tiles of the
// mma kernels (MoE and linear).
std::int64_t largest_divisor_within(std::int64_t n, std::int64_t limit);
// ks1, ks2 > 0 force FC1's and FC2's K split (batch invariance: the same sums for every chunk).
MmaGeometry mma_geometry(const MoeTiles& tiles, const MoeProblem& problem, int ks1 = 0, int ks2 = 0);
// The K split of one GEMM (K, its output rows) for chunks of few pairs (mma.few_split_k = 0).
int mma_auto_split_k(std::int64_t k, std::int64_t rows, int top_k);
// Whether the mma strategy runs a chunk of `pairs` (token, expert) pairs over `experts` local
// experts with the tiles for few pairs (mma_few_pairs_tiles): fewer than 5/16 of tile_m pairs
// per expert on average (10 for the built-in tiles of 32; tile_m / 2 before those tiles stopped
// staging). Measured on an H200 (2026-11-29, 2 rounds, µs, few against many pairs' tiles at 8
// and 12 pairs per expert): 8: qwen3-30b-a3b T = 128 W4A16 263.4 / 265.2 against 245.2 / 248.1,
// W4A4 286.0 / 287.2 against 270.3 / 270.6; gpt-oss-20b T = 64 MXFP4 W4A16 251.6 / 254.0
// against 279.8 / 279.8, W4A4 276.0 / 275.7 against 299.0 / 298.2; mixtral-8x7b T = 32 W4A16
// 438.0 / 445.4 against 426.5 / 431.6, W4A4 level (~473). 12: qwen3 T = 192 353.3 / 354.3
// against 268.3 / 271.9, W4A4 382.5 / 386.0 against 303.6 / 303.4; gpt-oss T = 96 341.2 / 343.0
// against 293.9 / 293.1, W4A4 370.7 / 372.2 against 316.4 / 318.0; mixtral T = 48 W4A16 451.3 /
// 448.8 against 434.9 / 438.5, W4A4 478.2 / 488.7 against 499.7 / 507.4. At 4 pairs per expert
// and fewer the few-pairs tiles win by 25-50 %.
bool mma_few_pairs_chunk(std::int64_t pairs, std::int64_t experts, int tile_m);
// The mma strategy runs chunks with few pairs (mma_few_pairs_chunk) with these tiles instead of
// the configured ones: tiles of 8 pairs, one row tile (two where a W4A4
// block of 32 rows must sit in one FC1 work-group) and few_split_k warps splitting K
// (FP4CL_MOE_TILES key mma.few_split_k), activations read straight from global memory. The
// automatic few_split_k (0) is kMmaFewSplitK for chunks of several tokens and, for one token
// (`one_token`: top_k tiles), mma_auto_split_k per GEMM. Measured on an H100 (NVFP4 W4A16, bench/gpu/sweep-mma.sh): at
// mixtral-8x7b T = 8 345-395 us (runs differ) against 940 with the prefill tiles (32 pairs, 8
// row tiles). Never staged, also where MXFP4 W4A4's FC1 takes two row tiles (a block of 32
// rows): staged, gpt-oss-20b's FC1 at T = 8 took 185.9 µs on an H200 (`--launches`) against 86.3
// for NVFP4 W4A4's one row tile and 79.9 for MXFP4 W4A16's.
MoeTiles mma_few_pairs_tiles(const MoeTiles& tiles, const MoeProblem& problem, bool one_token = false);
// The automatic K split of chunks of several tokens with few pairs per expert. Measured on an
// H100 (2026-11-24, 2 interleaved rounds, µs, against mma_auto_split_k's FC1 / FC2 splits of 8 / 3
// for qwen3-30b-a3b and 4 / 8 for mixtral-8x7b): qwen3 W4A16 T = 8, 16, 64: 87.0 / 87.6, 141.1 /
// 141.3, 212.2 / 211.5 -> 85.2 / 85.2, 135.4 / 139.5, 202.2 / 203.8; W4A4 118.8 / 115.5, 167.9 /
// 163.3, 242.7 / 241.4 -> 114.9 / 114.2, 161.5 / 167.9, 228.9 / 234.2; mixtral W4A16 T = 8, 16:
// 249.9 / 248.6, 337.9 / 337.7 -> 250.9 / 250.4, 329.5 / 329.0; W4A4 277.0 / 277.8, 365.8 / 370.4
// -> 276.5 / 274.2, 359.7 / 356.4. One token keeps mma_auto_split_k (2 there: mixtral T = 1
// W4A16 89.9 -> 126.7 µs).
constexpr int kMmaFewSplitK = 2;
// One token under W4A4, every FC1 work-group quantizes the token into local memory before its K
// loop; with MMA_ROW_LOOP = r it then multiplies r blocks of rows one after the other, so r times
// fewer work-groups quantize and wait. Automatic r (MoeTiles::row_loop 0): the largest of 8, 4, 2
// dividing the blocks that leaves at least 1.5 work-groups a compute unit. Measured on an H100
// (132 units, NVFP4, µs, 2 rounds, r = 1 / 2 / 4 / 8): mixtral-8x7b (448 work-groups at r = 1)
// 115.7, 116.7 / 100.6, 100.4 / 114.7, 114.7 / 168.7, 168.7; qwen3-30b-a3b (96) 32.8, 31.0 / 33.5,
// 33.3 / 48.6, 49.2 / 63.7, 63.5.
int mma_pair_row_loop(std::int64_t blocks, int top_k, int compute_units);
// The row tiles the one-token W4A4 FC1 may take (every work-group quantizes the token, so wider
// work-groups quantize it fewer times), widest first: 4 and 2 where 16·rt rows divide I, keep
// whole blocks of the scheme, exceed `row_tiles` (the few-pairs geometry's) and 32·rt·`split_k`
// work-items fit the device's `max_work_group`; then `row_tiles` itself. (gpt-oss-20b: a K split
// of 9 warps, so 4 row tiles would be 1152 work-items, more than an H200's 1024.)
std::vector<int> mma_pair_fc1_row_tiles(const MoeProblem& p, int row_tiles, int split_k, std::size_t max_work_group);
// Routed chunks (few tokens, up to kMmaRoutedPairs pairs) under W4A4: every FC1 work-group
// quantizes its tile's tokens into local memory (2·H bytes each, BF16 pairs) instead of a
// moe_gather_pairs launch before FC1, with tiles of at most this many pairs: the largest of 4 and 2
// whose tokens take at most kMmaRoutedLocalBytes and `free_local_bytes` (what FC1's other local
// arrays leave); 0 (the gather stays) when 2 do not fit, or where a routed chunk's pairs may
// exceed half the `local_experts` (an expert with more pairs than a tile takes several passes over
// its weights: with few experts, most of them would).
// Measured on an H100 (qwen3-30b-a3b, NVFP4 W4A4, 2026-11-28, 2 alternating rounds, µs, T = 2 /
// 4 / 8): the gather 62.7, 47.6 / 62.0, 119 (an outlier; 58-62 in other runs) / 104.2, 99.6;
// tiles of 8 (32 KiB) 38.7, 38.4 / 63.7, 117.8 / 101.9, 100.4; of 4 38.9, 38.1 / 58.4, 59.6 /
// 93.2, 93.4; of 2 39.4, 41.2 / 61.4, 60.7 / 93.7, 94.2. Two blocks of rows a work-group (one
// quantized copy for both) were slower at T = 2 and 4 (43.8-44.0, 58.6-60.4) and level at 8.
// mixtral-8x7b (8 experts, tiles of 2 at H = 4096): T = 2 level (178 / 177 against 177 / 177), T =
// 8 411 / 413 against 265 / 263.
constexpr int kMmaRoutedLocalTile = 4;
constexpr std::uint64_t kMmaRoutedLocalBytes = 16384;
int mma_routed_local_tile(std::int64_t hidden, std::int64_t local_experts, std::uint64_t free_local_bytes);
// Those chunks' FC1 work-groups take kMmaRoutedLocalRowTiles row tiles of 16 (unstaged: every
// warp reads the one quantized copy), so each copy serves twice the rows and half as many
// work-groups quantize: mma_routed_local_row_tiles gives it where it divides the intermediate size
// and keeps whole FP4 blocks of `block_rows` rows (else `row_tiles`, the few-pairs tiles' count).
// Measured on an H100 (qwen3-30b-a3b, NVFP4 W4A4, 2026-11-28, 3 alternating rounds, µs, T = 2 / 4 /
// 8): 1 row tile 37.9, 37.4, 37.6 / 58.4, 57.9, 58.9 / 91.9, 91.4, 91.6; 2: 36.9, 35.8, 35.8 /
// 55.6, 54.5, 54.8 / 87.3, 87.0, 86.5; 4: 37.4, 36.9, 36.6 / 53.2, 53.0, 53.2 / 88.3, 87.6, 88.3;
// 8: 37.9, 36.9, 36.6 / 63.7, 63.5, 63.7 / 96.3, 94.5, 95.5 (`--launches` T = 8, FC1: 59.1 with 1,
// 54.8 with 4, 62.0 with 8; FC2 31.5 in each).
constexpr int kMmaRoutedLocalRowTiles = 2;
int mma_routed_local_row_tiles(std::int64_t intermediate, int block_rows, int row_tiles);
// Their warps multiply one row tile each unless MoeTiles::routed_warp_tiles asks for 2 or 4 (MMA_MT,
// each B fragment serving them all; the automatic 0 takes 1 on every device). Until the MMA
// layout stored its codes bit by bit (2026-11-29), tensor cores took 2 where that left 2.5
// work-groups a compute unit: on an H200 (NVFP4 W4A4, µs, 1 / 2 row tiles a warp) qwen3-30b-a3b
// T = 4 / 8 54.0-55.0 / 82.7-83.2 against 52.5-53.0 / 75.0-76.8, qwen3-235b-a22b T = 2 / 4 / 8
// 86.5-87.0 / 135-137 / 230 against 82.7 / 122-123 / 222. With the codes decoded in fewer
// instructions 2 no longer pays (H200, 2 alternating rounds, 1 / 2): qwen3-30b-a3b T = 4 / 8
// 44.3-45.1 / 68.9-69.4 against 43.5-45.6 / 72.2-73.2, qwen3-235b-a22b T = 2 / 4 / 8 70.7, 70.7 /
// 118.0, 118.5 / 199.9, 200.2 against 69.4, 70.1 / 122.6, 122.9 / 202.2, 203.3. Its qwen3 T = 8
// program needs 100 registers a work-item (ptxas) against 96 before, which would fit 4 work-groups
// of 128 in an SM's registers instead of 5; unconfirmed: NVIDIA's driver 580 applies no register
// cap through build options (=N is ignored, "-cl-nv-maxrregcount N" fails the build), and caps
// written into the PTX made the routed FC1 slower (2026-12-02, bench/gpu/history.md).
// Whether a routed chunk of `pairs` pairs runs FC2 as one work-group per (token, block of rows)
// whose top_k warps multiply the token's pairs over the whole K (no K split) and sum them in order
// (MMA_TOKEN_SUM: no y rows, no count of finished tiles, no fence, no routing in FC2), instead of
// one per (tile of pairs, block of rows) counted by the last to finish (the automatic
// MoeTiles::routed_fc2): where at most one pair in two has an expert to itself out of the local
// experts (2 · pairs <= local experts: a pair's weights are read once per pair that shares its
// expert, not once per tile) and FC2's K (I) is at most 24 chunks of 64 (short K loops).
// Measured on an H200 (2026-11-29, 2 rounds each, µs, a work-group a tile against one a token):
// qwen3-30b-a3b (I = 768) NVFP4 W4A16 T = 2 / 4 / 8 31.2, 32.0 / 48.1, 48.6 / 69.4, 69.6 against
// 30.0, 30.2 / 44.3, 44.8 / 62.7, 63.7 (`--launches` FC2 at T = 8: 30.2 against 23.6), W4A4
// 37.4, 35.6 / 53.2, 53.0 / 76.0, 75.0 against 32.3, 34.3 / 47.6, 48.4 / 68.4, 69.4; qwen3-235b-a22b
// (I = 1536) W4A4 T = 8 221.2, 219.6 against 213.8, 214.8; deepseek-v3 (I = 2048) W4A16 T = 8
// 444.4, 441.6 against 439.0, 440.3 (level); gpt-oss-20b (I = 2880, 32 experts) MXFP4 W4A16 T = 8
// 123.4, 124.7 against 138.5, 139.0 (its 32 pairs share 32 experts). The shipped rule against
// mma.routed_fc2 1, the same day: qwen3 W4A16 T = 8 63.7, 63.7 against 69.6, 70.9, W4A4 69.4,
// 69.6 against 75.3, 76.5; qwen3-235b W4A16 T = 2 / 8 71.4, 71.9 / 195.8, 194.8 against 76.0, 76.0
// / 199.7, 198.9. With the tiles' K split (2 warps) instead of none it lost: qwen3 W4A16 T = 8
// 83.5-85.2, deepseek 493-494; 2 row tiles a warp were level. One token keeps its FC2 of a
// work-group a pair (K split by mma_auto_split_k): a work-group a token without a K split took
// mixtral-8x7b T = 1 118.8 µs against 77.6, gpt-oss 49.9-50.7 against 38.7-39.9.
bool mma_routed_token_fc2(std::int64_t pairs, std::int64_t local_experts, std::int64_t intermediate);
// Whether the mma strategy runs on tensor cores on this device (inline PTX: NVIDIA, compute
// capability 8.0 or more); elsewhere it is emulated.
bool mma_native(const DeviceInfo& device);

struct MoeSelection {
  struct Entry {
    MoeStrategy id;
    MoeTiles tiles;
    // The largest call (in pairs: tokens × k) these tiles serve. A strategy has several entries
    // only where tuned buckets give it several sets of tiles (grouped: tuning::MoeTuned::grouped),
    // by increasing max_pairs; its last serves every larger call.
    std::int64_t max_pairs = std::numeric_limits<std::int64_t>::max();
    // Where the tiles come from: "built-in", "FP4CL_MOE_TILES", "tuned (FILE)" (one set from the
    // database's buckets) or "tuned bucket 512 (FILE)" (neighbours with the same tiles: ", "), the
    // tuned ones prefixed "FP4CL_MOE_TILES over " where the variable sets some of their keys.
    std::string origin = "built-in";
    // "mma: tile_m 64, local sizes 32 and 32, split_k 1, ... [tuned bucket 512 (FILE)]"
    std::string describe() const;
  };
  MoeLayout layout;           // shared by every strategy: the weights are prepared once
  std::vector<Entry> usable;  // the strategies this layer builds, in selection order
  bool forced = false;        // one strategy named by FP4CL_MOE_KERNEL or the config
  std::int64_t decode_max_pairs = 0;
  std::int64_t split_max_pairs = 0;

  // The strategy for a chunk of `tokens` tokens (logs at debug why the other was not taken).
  const Entry& for_tokens(std::int64_t tokens, int top_k) const;
  // Whether strategy `s` is among the usable ones.
  bool uses(MoeStrategy s) const;
};

// `requested`: a strategy name, or "" for FP4CL_MOE_KERNEL when set, else automatic.
// `one_tile_set`: one entry a strategy (MoeConfig::batch_invariant: a token's bits must not
// depend on the call's size through the tiles), the largest bucket's tiles.
// `float_width`: the device's preferred fp32 vector width (CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT).
// Throws fp4cl::Error for an unknown name (listing the valid ones), for a forced strategy the
// device refuses (with the reason), and when no strategy can serve the layer (with every reason).
MoeSelection select_moe_strategies(const DeviceInfo& device, unsigned float_width, const MoeProblem& problem,
                                   const std::string& requested, bool one_tile_set = false);

}  // namespace fp4cl
