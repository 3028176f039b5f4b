// MoE expert GEMMs on tensor cores (the `mma` strategy): the grouped pipeline (moe_dispatch.cl's
// sort and gather, the top-k sum fused into FC2) with FC1 and FC2 as m16n8k16 BF16 MMAs with fp32
// accumulation (common/fp4_mma.cl) over weights in the MMA layout
// (host/prepare/fp4_mma_layout.hpp). A work-group's tile and rows: moe_mma_tiles.cl; the
// activations it reads: moe_mma_activations.cl.
//
//   moe_mma_fc1  one work-group per (MMA_ROWS rows of I, tile of up to MMA_TOKENS pairs of one
//                expert): warp (rt, ks) multiplies the 16 gate rows and the 16 up rows of row
//                tiles rt · MMA_MT .. rt · MMA_MT + MMA_MT - 1 (each B fragment serving them all)
//                with the tile's tokens (MMA_NT MMAs of 8 tokens per k16 step) over the
//                ks-th of MMA_KSPLIT equal slices of K = H; the slices' partial sums meet in
//                local memory and are added in slice order; a = bf16(silu(g) × up) (W4A4:
//                quantized per block) to x2 [slots, I].
//   moe_mma_fc2  the same for W2 over K = I: y[pair, n] = fc2_factor[e] · (W2[e] x2[slot])[n];
//                with MMA_SUM (few tokens) the last work-group of a block of rows sums the
//                top-k (moe_reduce's sum), else moe_reduce does; with MMA_TOKEN_SUM one
//                work-group per (token, block of rows), its MMA_TOPK groups of warps multiplying
//                the token's pairs (each its expert's rows), sums them itself.
//
// Each lane streams one uint4 of codes (four MMAs' A fragments) and one uint2 / uint of block
// scales per 64 elements of K: a warp reads 512 contiguous bytes of codes per chunk. Activations
// (x1 / x2: BF16 rows of BF16 inputs, bf16-rounded SwiGLU outputs, or W4A4's e2m1 × scale, all
// exact in BF16; half the bytes and loads of fp32 rows) are read as B fragments either straight from global memory (MMA_STAGE 0:
// few tokens, one row tile a work-group; no barrier in the K loop) or (MMA_STAGE 1: several row
// tiles share them) staged in local memory as BF16 pairs, MMA_KSTAGE chunks of every K slice at
// a time (a token's row stride padded to 4 words more than 32·MMA_KSTAGE: a lane reads its 8
// pairs of a chunk as two 16-byte loads, and the 8 lanes of each quarter-warp, 2 tokens × 4
// lanes, hit 8 different 4-word bank groups). Tokens past the tile's count repeat its last one
// (computed, not stored).
//
// W4A16 with MMA_DIRECT: FC1 reads the caller's BF16 input rows in place (slot_pair / top_k is a
// slot's token): a BF16 pair is a B fragment register as it is, and moe_gather is not launched.
// With MMA_UNROLL > 1 (unstaged K loops) a warp loads MMA_UNROLL chunks of weights before their
// MMAs: more bytes in flight per warp.
// MMA_PER_PAIR (one token, no moe_sort): tile p is pair p and slot p; FC1 routes the caller's
// top-k ids itself (or its router logits with MMA_ROUTE_LOGITS, or reads pair_expert from the
// logit router), zeroes FC2's row-block counts,
// and under W4A4 quantizes the token into local memory (MMA_HIDDEN floats); FC2 counts every
// pair's work-group, local or not.
// MMA_ROUTED (up to MMA_ROUTE_PAIRS pairs: few tokens, no moe_sort): tile p is led by pair p
// (mma_route_tile: moe_sort's tiles found by each work-group itself, of up to MMA_ROUTE_TILE
// pairs); slots are pairs. FC1 routes as MMA_PER_PAIR's does; under W4A4 it quantizes the tile's
// tokens into local memory (MMA_HIDDEN defined: MMA_ROUTE_TILE rows) or reads moe_gather_pairs'
// rows by pair.
//
// MMA_TOKEN_SUM (FC2 of routed chunks: slots are pairs, x2 rows by pair): work-group (t, b) is
// token t's top-k pairs over block b of rows, MMA_WARPS warps a pair (an MMA's 8 columns all the
// one token); their sums meet in local memory and the top-k sum is moe_reduce's, in pair order,
// straight to the output: no y, no count, no fence.
//
// Build-time parameters: MOE_NVFP4 (else MXFP4), MOE_W4A4, FP4_MMA_PTX (common/fp4_mma.cl),
//   MMA_DIRECT (W4A16 FC1: x read in place), MMA_UNROLL (chunks loaded ahead, unstaged only),
//   MMA_SUM (FC2: the top-k sum fused), MMA_PER_PAIR and MMA_HIDDEN (above), MMA_ROUTED and
//   MMA_ROUTE_TILE (FC1's routed tiles, at most 8 · MMA_NT pairs: the default), MMA_ROUTE_LOGITS
//   (the one-token or routed FC1 routes router logits itself: route_fused 2, with
//   moe_route_token.cl's ROUTE_* parameters), MMA_TOKEN_SUM and
//   MMA_TOPK (above; work-groups of MMA_TOPK · 32 · MMA_RT · MMA_KSPLIT work-items),
//   MMA_NT (MMAs of 8 tokens a step: tiles of 8·MMA_NT pairs), MMA_RT (warps along the rows a
//   work-group), MMA_MT (row tiles of 16 a warp, default 1), MMA_KSPLIT (warps splitting K; it divides the GEMM's K / 64, the host checks),
//   MMA_STAGE, MMA_KSTAGE (chunks of 64 staged per K slice at a time), MMA_ROW_LOOP (FC1 one
//   token under W4A4 or routed: blocks of rows a work-group multiplies after one quantized copy
//   or one routing). Work-group: 32 · MMA_RT · MMA_KSPLIT
//   work-items; the work-group's rows (16 · MMA_RT · MMA_MT) divide I (FC1) and H (FC2); under W4A4 FC1's
//   are a multiple of the FP4 block.
#define MOE_VEC 1
#include "moe_fp4_vec.cl"
#include "moe_quant.cl"
#include "moe_expert_map.cl"
#ifndef MMA_ROUTE_LOGITS
#define MMA_ROUTE_LOGITS 0
#endif
#if MMA_ROUTE_LOGITS
#if !defined(MMA_FC1) || !(MMA_PER_PAIR || MMA_ROUTED)
#error "MMA_ROUTE_LOGITS: the one-token or routed FC1 only"
#endif
#include "moe_route_token.cl"
// Slot j of a token's pairs after route_token: the routed slots' experts (chosen, through the
// expert_map to local ids) and weights, then past routed_k the shared experts shared_first, ...
// with weight 1.
inline int mma_logit_slot_expert(int j, int routed_k, int shared_first, __local const int* chosen, int num_global,
                                 __global const int* expert_map, int num_local) {
  return j < routed_k ? moe_local_expert(chosen[j], num_global, expert_map, num_local) : shared_first + j - routed_k;
}
inline float mma_logit_slot_weight(int j, int routed_k, __local const float* score, __local const int* chosen,
                                   int renormalize, float scaling) {
  return j < routed_k ? route_slot_weight(score, chosen, j, renormalize, scaling) : 1.0f;
}
#endif
#ifdef MOE_NVFP4
#define FP4_MMA_NVFP4
#endif
#include "common/fp4_mma.cl"

#ifdef MMA_FC1
#define MMA_MATS 2  // gate, up
#else
#define MMA_MATS 1  // W2
#endif
#ifndef MMA_PER_PAIR
#define MMA_PER_PAIR 0
#endif
#ifndef MMA_ROUTED
#define MMA_ROUTED 0
#endif
#if defined(MMA_FC1) && defined(MMA_DIRECT) && MMA_DIRECT && !MOE_W4A4
#define MMA_X_DIRECT 1
#else
#define MMA_X_DIRECT 0
#endif
// FC1 under W4A4 with MMA_HIDDEN defined: the tile's tokens quantized into local memory, one
// (MMA_PER_PAIR) or up to MMA_ROUTE_TILE (MMA_ROUTED): MMA_X_TOKENS rows of MMA_HIDDEN.
#if defined(MMA_FC1) && MOE_W4A4 && defined(MMA_HIDDEN) && (MMA_PER_PAIR || MMA_ROUTED)
#define MMA_X_LOCAL 1
#else
#define MMA_X_LOCAL 0
#endif
#ifndef MMA_ROUTE_TILE
#define MMA_ROUTE_TILE (8 * MMA_NT)
#endif
#if MMA_ROUTE_TILE < 1 || MMA_ROUTE_TILE > 8 * MMA_NT
#error "MMA_ROUTE_TILE must be 1 .. 8 * MMA_NT"
#endif
#if MMA_X_LOCAL && MMA_ROUTED
#define MMA_X_TOKENS MMA_ROUTE_TILE
#else
#define MMA_X_TOKENS 1
#endif
#ifndef MMA_UNROLL
#define MMA_UNROLL 1
#endif
#ifndef MMA_SUM
#define MMA_SUM 0
#endif
// FC1 one token under W4A4 (MMA_X_LOCAL) or routed (MMA_ROUTED): blocks of rows a work-group
// multiplies one after the other with the one quantized copy of the token, after its one routing
// (that latency paid once, not per block).
#ifndef MMA_ROW_LOOP
#define MMA_ROW_LOOP 1
#endif
// Loops over fragments, matrices and chunks unrolled on tensor cores; kept as loops where the MMA
// is emulated (less code for PoCL to compile).
#if FP4_MMA_PTX
#define MMA_UNROLLED _Pragma("unroll")
#else
#define MMA_UNROLLED _Pragma("unroll 1")
#endif
#ifndef MMA_MT
#define MMA_MT 1
#endif
#ifndef MMA_TOKEN_SUM
#define MMA_TOKEN_SUM 0
#endif
#if MMA_TOKEN_SUM && (!defined(MMA_FC2) || !defined(MMA_TOPK) || MMA_STAGE || MMA_NT != 1 || MMA_PER_PAIR || MMA_ROUTED)
#error "MMA_TOKEN_SUM: FC2 only, with MMA_TOPK, unstaged, tiles of one pair (MMA_NT 1), not per pair or routed"
#endif
#if MMA_TOKEN_SUM
#define MMA_GROUP_PAIRS MMA_TOPK  // a work-group multiplies one token's top-k pairs
#else
#define MMA_GROUP_PAIRS 1
#endif
#define MMA_WARPS (MMA_RT * MMA_KSPLIT)  // warps a pair
#define MMA_GROUP_WARPS (MMA_WARPS * MMA_GROUP_PAIRS)
#define MMA_LOCAL (32 * MMA_GROUP_WARPS)
#define MMA_TILES (MMA_RT * MMA_MT)  // row tiles of 16 a work-group
#define MMA_ROWS (16 * MMA_TILES)
// A warp's A operands: matrix m of its row tile q is operand q · MMA_MATS + m (each B fragment
// serves them all).
#define MMA_AMATS (MMA_MATS * MMA_MT)
#define MMA_TOKENS (8 * MMA_NT)
#define MMA_XSTRIDE (32 * MMA_KSTAGE + 4)
#define MMA_XWORDS (MMA_KSPLIT * MMA_TOKENS * MMA_XSTRIDE)
// One local buffer holds the staged activations during the K loop and the K slices' partial
// sums after it.
#define MMA_PART_FLOATS (MMA_KSPLIT * MMA_TILES * MMA_MATS * MMA_NT * 128)  // a pair's
#if MMA_STAGE
#define MMA_LDS_WORDS (MMA_XWORDS > MMA_PART_FLOATS ? MMA_XWORDS : MMA_PART_FLOATS)
#else
#define MMA_LDS_WORDS (MMA_PART_FLOATS * MMA_GROUP_PAIRS)
#endif

#include "moe_mma_tiles.cl"
#include "moe_mma_activations.cl"

#if FP4_MMA_PTX
typedef char mma_emulation_t;  // nothing: the lanes' fragments meet in the tensor core
#else
// What the emulated MMAs read besides the lane's own fragments: every A operand's codes (the
// lane's word; its quad's are beside it) and the rows of the tokens of the lane's two C columns
// (2t + h of each MMA of 8 tokens) in global memory or in the staged activations.
typedef struct {
  __global const uint4* wp[MMA_AMATS];
  mma_row_t xc[2][MMA_NT];
  const __local uint* xs;  // the staged activations of the warp's K slice, token 0
} mma_emulation_t;
#endif

// The MMAs of one chunk (four MMAs of 16 k) of every A operand (MMA_AMATS: matrix and row tile)
// with every MMA of 8 tokens: chunk c of the warp's K slice (cc: its index in the current stage).
// The lane's scales are one block's.
inline void mma_chunk(const uint4* wv, const mma_scales_t* sv, int scale_exp, const mma_place_t* pl,
                      const mma_row_t* xr, const __local uint* xw, int c, int cc, float acc[MMA_AMATS][MMA_NT][4],
                      const mma_emulation_t* em) {
#if !FP4_MMA_PTX
  // Emulated (common/fp4_mma.cl, fp4_mma_chunk_emulated): the fragments of the lane's quad and of
  // its columns' lanes, each made as that lane makes its own.
  (void)wv, (void)xr, (void)xw;
  uint aq[4 * 4 * MMA_AMATS * 4], bq[2 * 4 * MMA_NT * 8];
  for (int m = 0; m < MMA_AMATS; ++m)
    mma_quad_fragments(em->wp[m] + c * 32, sv[m], pl->t, scale_exp, m, MMA_AMATS, aq);
  for (int tq = 0; tq < 4; ++tq) {
    for (int h = 0; h < 2; ++h)
      for (int n = 0; n < MMA_NT; ++n) {
        uint* b = bq + ((h * 4 + tq) * MMA_NT + n) * 8;
#if MMA_STAGE
        mma_b8_bf16_local(em->xs + (n * 8 + 2 * pl->t + h) * MMA_XSTRIDE + cc * 32, 8 * tq, b);
#else
        mma_x_pairs8(em->xc[h][n], 32 * (pl->ks * pl->per_warp + c) + 8 * tq, b);
#endif
      }
  }
  fp4_mma_chunk_emulated(&acc[0][0][0], aq, bq, MMA_AMATS, MMA_NT);
#else
  (void)em;
  uint b[MMA_NT][8];
#if MMA_STAGE
  mma_b_local(xw, cc, b);
#else
  mma_b_global(xr, pl->ks * pl->per_warp + c, pl->t, b);
#endif
  uint lo[MMA_AMATS], hi[MMA_AMATS];
MMA_UNROLLED
  for (int m = 0; m < MMA_AMATS; ++m) mma_lane_scales(sv[m], pl->t, scale_exp, &lo[m], &hi[m]);
MMA_UNROLLED
  for (int j = 0; j < 4; ++j) {
    uint a[MMA_AMATS][4];
MMA_UNROLLED
    for (int m = 0; m < MMA_AMATS; ++m) mma_fragment(mma_word(wv[m], j), lo[m], hi[m], a[m]);
MMA_UNROLLED
    for (int nt = 0; nt < MMA_NT; ++nt)
MMA_UNROLLED
      for (int m = 0; m < MMA_AMATS; ++m) FP4_MMA(acc[m][nt], a[m], b[nt][2 * j], b[nt][2 * j + 1]);
  }
#endif
}

// The warp's K slice of its row tile for every matrix (w[m], s[m]: the MMA layout's codes and
// scales) and MMA of 8 tokens: acc[m][nt]. Called by the whole work-group (barriers when
// staged).
inline void mma_k_loop(__global const uint4* const* w, __global const mma_scales_t* const* s, int scale_exp,
                       const mma_place_t* pl, mma_x_t* x, int k_len, mma_slots_t* slot_pair, int top_k,
                       int token_offset, __local uint* xs, float acc[MMA_AMATS][MMA_NT][4]) {
  mma_row_t xr[MMA_NT];
MMA_UNROLLED
  for (int nt = 0; nt < MMA_NT; ++nt) {
    xr[nt] = mma_row(x, k_len, pl->start + min(nt * 8 + pl->g, pl->count - 1), slot_pair, top_k, token_offset);
MMA_UNROLLED
    for (int m = 0; m < MMA_AMATS; ++m)
MMA_UNROLLED
      for (int r = 0; r < 4; ++r) acc[m][nt][r] = 0.0f;
  }
  // Operand m: matrix m % MMA_MATS of the warp's row tile m / MMA_MATS.
  __global const uint4* wp[MMA_AMATS];
  __global const mma_scales_t* sp[MMA_AMATS];
MMA_UNROLLED
  for (int m = 0; m < MMA_AMATS; ++m) {
    const long first = pl->first + (long)(m / MMA_MATS) * pl->chunks;
    wp[m] = w[m % MMA_MATS] + first * 32 + pl->lane;
    sp[m] = s[m % MMA_MATS] + first * 8 + pl->g;
  }
  const __local uint* xw = xs + (pl->ks * MMA_TOKENS + pl->g) * MMA_XSTRIDE + 8 * pl->t;
  mma_emulation_t em;
#if !FP4_MMA_PTX
  for (int m = 0; m < MMA_AMATS; ++m) em.wp[m] = wp[m];
  for (int h = 0; h < 2; ++h)
    for (int nt = 0; nt < MMA_NT; ++nt)
      em.xc[h][nt] = mma_row(x, k_len, pl->start + min(nt * 8 + 2 * pl->t + h, pl->count - 1), slot_pair, top_k,
                             token_offset);
  em.xs = xs + pl->ks * MMA_TOKENS * MMA_XSTRIDE;
#endif
  uint4 wv[MMA_UNROLL][MMA_AMATS];
  mma_scales_t sv[MMA_UNROLL][MMA_AMATS];
#if MMA_STAGE
  for (int s0 = 0; s0 < pl->per_warp; s0 += MMA_KSTAGE) {
    const int n = min(MMA_KSTAGE, pl->per_warp - s0);
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous stage is consumed
    mma_stage(xs, x, k_len, pl, slot_pair, top_k, token_offset, s0, n);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int cc = 0; cc < n; ++cc) {
MMA_UNROLLED
      for (int m = 0; m < MMA_AMATS; ++m) {
        wv[0][m] = wp[m][(s0 + cc) * 32];
        sv[0][m] = sp[m][(s0 + cc) * 8];
      }
      mma_chunk(wv[0], sv[0], scale_exp, pl, xr, xw, s0 + cc, cc, acc, &em);
    }
  }
#else
  int c = 0;
  for (; c + MMA_UNROLL <= pl->per_warp; c += MMA_UNROLL) {
MMA_UNROLLED
    for (int u = 0; u < MMA_UNROLL; ++u) {
MMA_UNROLLED
      for (int m = 0; m < MMA_AMATS; ++m) {
        wv[u][m] = wp[m][(c + u) * 32];
        sv[u][m] = sp[m][(c + u) * 8];
      }
    }
MMA_UNROLLED
    for (int u = 0; u < MMA_UNROLL; ++u) mma_chunk(wv[u], sv[u], scale_exp, pl, xr, xw, c + u, 0, acc, &em);
  }
  for (; c < pl->per_warp; ++c) {
MMA_UNROLLED
    for (int m = 0; m < MMA_AMATS; ++m) {
      wv[0][m] = wp[m][c * 32];
      sv[0][m] = sp[m][c * 8];
    }
    mma_chunk(wv[0], sv[0], scale_exp, pl, xr, xw, c, 0, acc, &em);
  }
#endif
}

// The warps' sums to local memory (after a barrier: the staged activations share it): operand m
// of warp (rt_local, ks) is matrix m % MMA_MATS of the work-group's row tile rt_local · MMA_MT +
// m / MMA_MATS.
inline void mma_store_partials(__local float* part, const mma_place_t* pl, float acc[MMA_AMATS][MMA_NT][4]) {
#pragma unroll
  for (int m = 0; m < MMA_AMATS; ++m)
#pragma unroll
    for (int nt = 0; nt < MMA_NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        part[(((pl->ks * MMA_TILES + pl->rt_local * MMA_MT + m / MMA_MATS) * MMA_MATS + m % MMA_MATS) * MMA_NT + nt) *
                 128 +
             pl->lane * 4 + r] = acc[m][nt][r];
}
// Matrix m's sum over the K slices, in slice order, at (row r of the work-group, token column mt).
inline float mma_sum_partials(const __local float* part, int m, int r, int mt) {
  const int rl = r / 16, nt = mt / 8, at = mma_c_index(r % 16, mt % 8);
  float h = 0.0f;
  for (int k = 0; k < MMA_KSPLIT; ++k) h += part[(((k * MMA_TILES + rl) * MMA_MATS + m) * MMA_NT + nt) * 128 + at];
  return h;
}

#ifdef MMA_FC1
#if MMA_X_LOCAL
typedef __global const ushort mma_xarg_t;  // the caller's BF16 x, quantized here
#else
typedef mma_x_t mma_xarg_t;
#endif
//   gate_w, up_w [E·I/16, H/64, 32] uint4, gate_s, up_s their scales (MMA layout)
//   fc1_factor [E, 2], fc2_input_scale [E] (W4A4 NVFP4); x1 [slots, H] BF16 (moe_gather's
//   bf16_rows; with MMA_DIRECT or MMA_X_LOCAL the caller's x [tokens, H] instead, a slot's token
//   from slot_pair, top_k and token_offset), tiles, chunk_info, slot_pair: moe_sort's; x2
//   [slots, I] BF16 (written)
//   MMA_PER_PAIR (one token: pair p = tile p = slot p, no moe_sort): the expert of pair p from the
//   caller's topk_ids / topk_weights (route_fused; the work-group (0, p) writes pair_expert[p],
//   pair_weight[p] and the statistics, records invalid ids in status) or from pair_expert (routed
//   by the logit router); work-group (0, 0) zeroes done [done_count] for moe_mma_fc2; W4A4 x
//   quantized per block with fc1_input_scale[e] (NVFP4) into local memory.
//   route_fused 2 (MMA_ROUTE_LOGITS, one-token or routed chunks): the pairs routed here from the
//   caller's router logits [tokens, E_global] (moe_route_token.cl, with route_bias, renormalize and
//   scaling as moe_route_grouped's), every work-group routing the chunk's tokens itself: a token's
//   slots 0 .. routed_k - 1 its chosen experts, then its shared experts shared_first, ... with
//   weight 1; work-group (0, p) writes pair p as route_fused 1 does. No router launch.
__kernel __attribute__((reqd_work_group_size(MMA_LOCAL, 1, 1))) void moe_mma_fc1(
    __global const uint4* gate_w, __global const mma_scales_t* gate_s, __global const uint4* up_w,
    __global const mma_scales_t* up_s, __global const float* fc1_factor, int hidden, int inter, int scale_exp,
    mma_xarg_t* x1, __global const int* tiles, __global const int* chunk_info, __global const float* fc2_input_scale,
    __global ushort* x2, __global const int* slot_pair, int top_k, int token_offset, int route_fused,
    __global const int* topk_ids, __global const float* topk_weights, int num_global, __global const int* expert_map,
    int num_local, __global int* pair_expert, __global float* pair_weight, __global int* status,
    __global int* done, int done_count, __global const float* fc1_input_scale, int num_pairs,
    __global const float* fc1_bias, __global const float* logits, __global const float* route_bias, int renormalize,
    float scaling, int routed_k, int shared_first) {
  __local uint lds[MMA_LDS_WORDS] __attribute__((aligned(16)));  // 16-byte B fragment loads
  __local float* part = (__local float*)lds;
#if MOE_W4A4
  __local float a_local[MMA_TOKENS * MMA_ROWS];
#endif
  const int lid = get_local_id(0);
  mma_place_t pl;
#if MMA_ROUTE_LOGITS
  __local float route_score[ROUTE_EXPERTS], route_keys[ROUTE_EXPERTS], route_part[ROUTE_LOCAL];
  __local float route_group_score[ROUTE_GROUPS];
  __local int route_kept[ROUTE_GROUPS], route_chosen[ROUTE_TOPK];
#define MMA_ROUTE_SCRATCH route_score, route_keys, route_kept, route_chosen, route_part, route_group_score
#else
  (void)logits, (void)route_bias, (void)renormalize, (void)scaling, (void)routed_k, (void)shared_first;
#endif
#if MMA_PER_PAIR
  const int p = get_group_id(1);
  const long first_pair = (long)token_offset * top_k;  // the chunk's first pair in the caller's tensors
  if (get_group_id(0) == 0 && p == 0)
    for (int i = lid; i < done_count; i += MMA_LOCAL) done[i] = 0;
  int e;
#if MMA_ROUTE_LOGITS
  if (route_fused == 2) {
    // Slot j of the token (chunk token p / top_k: 0).
    route_token(logits + ((long)token_offset + p / top_k) * ROUTE_EXPERTS, route_bias, lid, MMA_LOCAL,
                MMA_ROUTE_SCRATCH);
    const int j = p % top_k;
    e = mma_logit_slot_expert(j, routed_k, shared_first, route_chosen, num_global, expert_map, num_local);
    if (get_group_id(0) == 0 && lid == 0) {
      pair_expert[p] = e;
      pair_weight[p] = mma_logit_slot_weight(j, routed_k, route_score, route_chosen, renormalize, scaling);
    }
  } else
#endif
  if (!route_fused) {
    e = pair_expert[p];
  } else if (get_group_id(0) == 0) {
    e = moe_local_expert(topk_ids[first_pair + p], num_global, expert_map, num_local);
    if (lid == 0) {
      moe_map_expert(topk_ids[first_pair + p], num_global, expert_map, num_local, first_pair + p, status);
      pair_expert[p] = e;
      pair_weight[p] = topk_weights[first_pair + p];
    }
  } else {
    e = moe_local_expert(topk_ids[first_pair + p], num_global, expert_map, num_local);
  }
  if (e < 0) return;  // uniform over the work-group
  if (get_group_id(0) == 0 && lid == 0) {
    atomic_add(&status[2], 1);
    atomic_add(&status[3], 1);
  }
  mma_place_at(&pl, e, p, 1, inter, hidden, get_group_id(0) * MMA_ROW_LOOP);
#elif MMA_ROUTED
  // Every work-group routes the chunk's pairs; work-group (0, q) records pair q (pair_expert,
  // pair_weight, an invalid id in status), (0, 0) zeroes done; a tile's leader counts it.
  __local int route_expert[MMA_ROUTE_PAIRS], route_list[MMA_TOKENS];
  __local uint route_mask[2];
  const int p = get_group_id(1);
  const long first_pair = (long)token_offset * top_k;
  if (get_group_id(0) == 0 && p == 0)
    for (int i = lid; i < done_count; i += MMA_LOCAL) done[i] = 0;
  if (lid < 2) route_mask[lid] = 0;
#if MMA_ROUTE_LOGITS
  // Router logits: the chunk's tokens one after the other, each by the whole work-group.
  for (int t = 0; route_fused == 2 && t < num_pairs / top_k; ++t) {
    if (t > 0) barrier(CLK_LOCAL_MEM_FENCE);  // the previous token's choice is read
    route_token(logits + ((long)token_offset + t) * ROUTE_EXPERTS, route_bias, lid, MMA_LOCAL,
                MMA_ROUTE_SCRATCH);
    for (int j = lid; j < top_k; j += MMA_LOCAL) {
      const int q = t * top_k + j;
      const int e = mma_logit_slot_expert(j, routed_k, shared_first, route_chosen, num_global, expert_map, num_local);
      route_expert[q] = e;
      if (get_group_id(0) == 0 && q == p) {
        pair_expert[q] = e;
        pair_weight[q] = mma_logit_slot_weight(j, routed_k, route_score, route_chosen, renormalize, scaling);
      }
    }
  }
  if (route_fused != 2)
#endif
  for (int q = lid; q < num_pairs; q += MMA_LOCAL) {
    int e;
    if (!route_fused) {
      e = pair_expert[q];
    } else if (get_group_id(0) == 0 && q == p) {
      e = moe_map_expert(topk_ids[first_pair + q], num_global, expert_map, num_local, first_pair + q, status);
      pair_expert[q] = e;
      pair_weight[q] = topk_weights[first_pair + q];
    } else {
      e = moe_local_expert(topk_ids[first_pair + q], num_global, expert_map, num_local);
    }
    route_expert[q] = e;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!mma_route_tile(&pl, num_pairs, route_expert, route_mask, route_list, inter, hidden))
    return;  // uniform over the work-group
  if (get_group_id(0) == 0 && lid == 0) {
    atomic_add(&status[2], 1);
    atomic_add(&status[3], pl.count);
  }
#else
  (void)route_fused, (void)topk_ids, (void)topk_weights, (void)num_global, (void)expert_map, (void)num_local;
  (void)pair_expert, (void)pair_weight, (void)status, (void)done, (void)done_count, (void)num_pairs;
  if (!mma_place(&pl, tiles, chunk_info, inter, hidden)) return;  // uniform over the work-group
#endif
#if MMA_X_LOCAL
  // The token, quantized per block with the expert's input scale (moe_gather's values), as BF16
  // pairs.
  __local uint xl[MMA_X_TOKENS * MMA_HIDDEN / 2] __attribute__((aligned(16)));
#ifdef MOE_NVFP4
  const float gs1 = fc1_input_scale[pl.e];
#else
  const float gs1 = 1.0f;
#endif
  const int row_blocks_x = MMA_HIDDEN / MOE_QUANT_BLOCK;
#if MMA_ROUTED
  // Slot m (pair route_list[m]) of the tile: moe_gather_pairs' row of that pair, made here.
  for (int b = lid; b < pl.count * row_blocks_x; b += MMA_LOCAL) {
    const int m = b / row_blocks_x, kb = b % row_blocks_x;
    const __global ushort* xt = x1 + ((long)token_offset + route_list[m] / top_k) * hidden;
    moe_quantize_bf16_pairs_local(xt + kb * MOE_QUANT_BLOCK, gs1,
                                  xl + m * (MMA_HIDDEN / 2) + kb * (MOE_QUANT_BLOCK / 2));
  }
#else
  const __global ushort* xt = x1 + ((long)token_offset + p / top_k) * hidden;
  for (int b = lid; b < row_blocks_x; b += MMA_LOCAL)
    moe_quantize_bf16_pairs_local(xt + b * MOE_QUANT_BLOCK, gs1, xl + b * (MOE_QUANT_BLOCK / 2));
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  mma_x_t* xsrc = xl;
#else
  (void)fc1_input_scale;
  mma_x_t* xsrc = x1;
#endif
  __global const uint4* w[2] = {gate_w, up_w};
  __global const mma_scales_t* s[2] = {gate_s, up_s};
  float acc[MMA_AMATS][MMA_NT][4];
#if MMA_ROUTED
  mma_slots_t* slots = route_list;
#else
  mma_slots_t* slots = slot_pair;
#endif
  for (int block = 0; block < MMA_ROW_LOOP; ++block) {
    if (block > 0) {
      barrier(CLK_LOCAL_MEM_FENCE);  // the previous block's partial sums and a_local are read
      mma_place_rows(&pl, get_group_id(0) * MMA_ROW_LOOP + block, inter);
    }
    mma_k_loop(w, s, scale_exp, &pl, xsrc, hidden, slots, top_k, token_offset, lds, acc);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the staged activations
    mma_store_partials(part, &pl, acc);
    barrier(CLK_LOCAL_MEM_FENCE);
    // One work-item per (row, token): the slices' sums in slice order, then SwiGLU.
    const int start = pl.start, count = pl.count, row0 = pl.row0;
    const float2 f = vload2(pl.e, fc1_factor);
    for (int i = lid; i < MMA_ROWS * MMA_TOKENS; i += MMA_LOCAL) {
      const int m = i / MMA_ROWS, r = i % MMA_ROWS;
      const float hg = mma_sum_partials(part, 0, r, m), hu = mma_sum_partials(part, 1, r, m);
      if (m < count) {
        const float a = moe_fc1_act(hg, hu, f, fc1_bias, pl.e, inter, row0 + r);
#if MOE_W4A4
        a_local[m * MMA_ROWS + r] = a;
#else
        x2[(long)mma_x2_row(slots, start + m) * inter + row0 + r] = (ushort)(as_uint(a) >> 16);  // a BF16 number
#endif
      }
    }
#if MOE_W4A4
    barrier(CLK_LOCAL_MEM_FENCE);
#ifdef MOE_NVFP4
    const float gs2 = fc2_input_scale[pl.e];
#else
    const float gs2 = 1.0f;
#endif
    const int blocks = MMA_ROWS / MOE_QUANT_BLOCK;
#if MMA_ROUTED
    // Routed tiles: a work-item a BF16 pair of a block (count · MMA_ROWS / 2 of them: MMA_ROWS / 2
    // work-items a token, rather than one a block of 16 or 32 values while the rest wait). Not
    // for one token (MMA_PER_PAIR): mixtral-8x7b's FC1 took 65 µs so against 52.5 on the H200.
    const int pairs = MOE_QUANT_BLOCK / 2;
    for (int i = lid; i < count * blocks * pairs; i += MMA_LOCAL) {
      const int m = i / (blocks * pairs), rb = (i / pairs) % blocks * MOE_QUANT_BLOCK, j = i % pairs;
      ((__global uint*)(x2 + (long)mma_x2_row(slots, start + m) * inter + row0 + rb))[j] =
          moe_quantize_block_pair(a_local + m * MMA_ROWS + rb, gs2, j);
    }
#else
    for (int b = lid; b < MMA_TOKENS * blocks; b += MMA_LOCAL) {
      const int m = b / blocks, rb = (b % blocks) * MOE_QUANT_BLOCK;
      if (m < count) {
        float v[MOE_QUANT_BLOCK];
        for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = a_local[m * MMA_ROWS + rb + i];
        moe_quantize_block_pairs(v, gs2, (__global uint*)(x2 + (long)mma_x2_row(slots, start + m) * inter + row0 + rb));
      }
    }
#endif
#else
    (void)fc2_input_scale;
#endif
  }  // block
}
#endif  // MMA_FC1

#ifdef MMA_FC2
// Device-wide release / acquire around the row block's completion count (the last work-group
// reads the others' y rows): PTX fences on NVIDIA, OpenCL fences elsewhere.
#if FP4_MMA_PTX
inline void mma_fence(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
#else
inline void mma_fence(void) { mem_fence(CLK_GLOBAL_MEM_FENCE); }
#endif

//   w2 [E·H/16, I/64, 32] uint4, w2_s its scales (MMA layout), fc2_factor [E]
//   x2 [slots, I] BF16 (moe_mma_fc1), tiles, chunk_info, slot_pair: moe_sort's; y [pairs, H] (written)
//   pair_expert, pair_weight [pairs]; out [tokens, H] BF16 or fp32 (the caller's, token t of the
//   chunk at token_offset + t); done [H / MMA_ROWS] (zeroed by moe_sort)
// With MMA_SUM (chunks of few pairs: few tokens) the top-k sum is fused: the last of the chunk's
// tiles to finish a block of rows (counted in done) computes out[t, rows] = Σ_s w[t,s] · y[t·k+s, rows], s = 0..k-1 in order, local pairs
// only (moe_reduce's sum): which work-group is last does not change a bit.
__kernel __attribute__((reqd_work_group_size(MMA_LOCAL, 1, 1))) void moe_mma_fc2(
    __global const uint4* w2, __global const mma_scales_t* w2_s, __global const float* fc2_factor, int hidden,
    int inter, int scale_exp, mma_x_t* x2, __global const int* tiles, __global const int* chunk_info,
    __global const int* slot_pair, __global float* y, __global const int* pair_expert,
    __global const float* pair_weight, int top_k, int num_tokens, int token_offset, __global void* out,
    __global int* done, __global const float* fc2_bias) {
  __local uint lds[MMA_LDS_WORDS] __attribute__((aligned(16)));  // 16-byte B fragment loads
  __local float* part = (__local float*)lds;
  __local int last;
  const int lid = get_local_id(0);
  mma_place_t pl;
#if MMA_TOKEN_SUM
  // Token t = group 0 (the chunk's tokens side by side: experts they share are read while in L2),
  // block of rows group 1; warps k · MMA_WARPS .. multiply pair t · top_k + k (slots are pairs),
  // the k-th partial sums. No y, no count: the work-group sums its token's top-k itself, in order.
  (void)tiles, (void)chunk_info, (void)y, (void)done, (void)last;
  const int t = get_group_id(0), k = lid / (32 * MMA_WARPS), q = t * MMA_TOPK + k, e = pair_expert[q];
  mma_place_at(&pl, max(e, 0), q, 1, hidden, inter, get_group_id(1));
  {
    __global const uint4* w[1] = {w2};
    __global const mma_scales_t* s[1] = {w2_s};
    float acc[MMA_AMATS][MMA_NT][4];
    if (e >= 0) {
      mma_k_loop(w, s, scale_exp, &pl, x2, inter, slot_pair, 1, 0, lds, acc);
      mma_store_partials(part + k * MMA_PART_FLOATS, &pl, acc);  // unstaged: lds holds only these
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // moe_reduce's sum: Σ_s w[t,s] · y[t·k+s, n], s = 0..k-1 in order, local pairs only.
  for (int r = lid; r < MMA_ROWS; r += MMA_LOCAL) {
    const int n = pl.row0 + r;
    float o = 0.0f;
    for (int j = 0; j < MMA_TOPK; ++j) {
      const int qj = t * MMA_TOPK + j, ej = pair_expert[qj];
      if (ej >= 0)
        o += pair_weight[qj] *
             moe_fc2_out(mma_sum_partials(part + j * MMA_PART_FLOATS, 0, r, 0), fc2_factor[ej], fc2_bias, ej, hidden, n);
    }
    moe_store_out(o, out, ((long)token_offset + t) * hidden + n);
  }
  (void)top_k, (void)num_tokens;
#else
#if MMA_PER_PAIR
  // Pair p is tile p; every work-group counts, local pair or not.
  const int p = get_group_id(1), e = pair_expert[p], ntiles = num_tokens * top_k, counted = 1;
  const int active = e >= 0;
  if (active) mma_place_at(&pl, e, p, 1, hidden, inter, get_group_id(0));
  mma_slots_t* slots = slot_pair;
#elif MMA_ROUTED
  // The tile led by pair p (moe_mma_fc1's, from pair_expert); every work-group counts.
  __local int route_expert[MMA_ROUTE_PAIRS], route_list[MMA_TOKENS];
  __local uint route_mask[2];
  const int num_pairs = num_tokens * top_k, ntiles = num_pairs, counted = 1;
  if (lid < 2) route_mask[lid] = 0;
  for (int q = lid; q < num_pairs; q += MMA_LOCAL) route_expert[q] = pair_expert[q];
  barrier(CLK_LOCAL_MEM_FENCE);
  const int active = mma_route_tile(&pl, num_pairs, route_expert, route_mask, route_list, hidden, inter);
  mma_slots_t* slots = route_list;
#else
  const int ntiles = chunk_info[0];
  const int active = mma_place(&pl, tiles, chunk_info, hidden, inter), counted = active;
  mma_slots_t* slots = slot_pair;
#endif
  if (active) {  // uniform over the work-group
    __global const uint4* w[1] = {w2};
    __global const mma_scales_t* s[1] = {w2_s};
    float acc[MMA_AMATS][MMA_NT][4];
    mma_k_loop(w, s, scale_exp, &pl, x2, inter, slots, 1, 0, lds, acc);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the staged activations
    mma_store_partials(part, &pl, acc);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float f = fc2_factor[pl.e];
    for (int i = lid; i < MMA_ROWS * MMA_TOKENS; i += MMA_LOCAL) {
      const int m = i / MMA_ROWS, r = i % MMA_ROWS;
      const float h = mma_sum_partials(part, 0, r, m);
      if (m < pl.count)
        y[(long)mma_pair_of(slots, pl.start + m) * hidden + pl.row0 + r] = moe_fc2_out(h, f, fc2_bias, pl.e, hidden, pl.row0 + r);
    }
  }
#if MMA_SUM
  if (counted) {
    mma_fence();  // this work-item's y rows are visible to the whole device
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) last = atomic_inc(&done[get_group_id(0)]) == ntiles - 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!last) return;  // uniform
    mma_fence();
  } else if (ntiles != 0 || get_group_id(1) != 0) {
    return;  // no tile; with no tiles at all (no local pairs) the first one writes the rows' zero sums
  }
#else
  (void)counted, (void)ntiles, (void)last;
  return;  // moe_reduce sums the top-k
#endif
  const int row0 = get_group_id(0) * MMA_ROWS;
  const __global volatile float* yv = y;  // written by other work-groups: not from this one's L1
  for (int i = lid; i < num_tokens * MMA_ROWS; i += MMA_LOCAL) {
    const int t = i / MMA_ROWS, n = row0 + i % MMA_ROWS;
    float o = 0.0f;
    for (int k = 0; k < top_k; ++k) {
      const int q = t * top_k + k;
      if (pair_expert[q] >= 0) o += pair_weight[q] * yv[(long)q * hidden + n];
    }
    moe_store_out(o, out, ((long)token_offset + t) * hidden + n);
  }
#endif  // MMA_TOKEN_SUM
}
#endif  // MMA_FC2
