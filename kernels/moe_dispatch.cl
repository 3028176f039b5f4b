// MoE dispatch: group the chunk's (token, slot) pairs by expert without any dependence on
// thread timing (moe_sort), then gather each pair's activations in that order as fp32, or as
// BF16 rows for the MMA kernels — quantized per block first under W4A4 (moe_gather,
// moe_gather_pairs).
//
// Build-time parameters: MOE_W4A4, MOE_NVFP4 (else MXFP4).
//
// Layouts written here and read by moe_fc1/moe_fc2:
//   slot_pair [pairs]  the pair at each slot: slots sorted by (local expert, pair index)
//   pair_slot [pairs]  its inverse, -1 for pairs with no local expert
//   tiles [3·max_tiles] (expert, first slot, pair count <= tile_m) per tile, experts ascending
//   chunk_info [2]     number of tiles, number of slots (pairs with a local expert)
//   status [4]         [2] += tiles, [3] += slots (statistics of the whole call)
#include "common/bf16.cl"
#include "common/bf16_dot.cl"
#include "common/formats.cl"
#include "moe_expert_map.cl"
#include "moe_quant.cl"
#include "moe_int_planes.cl"
#include "moe_scaled_x.cl"

// A counting sort in one work-group. Each work-item owns experts e = lid, lid + size, ... and
// scans the pairs in index order, so every slot position is a function of the input alone. The
// pairs' experts pass through local memory in blocks of MOE_SORT_BLOCK (one block, read once, for
// up to MOE_SORT_BLOCK pairs), and the per-expert counts stay there: on an H100 the scans over
// pair_expert in global memory, each load behind the previous slot store, took 8-17 µs a call.
// route_fused = 1: first routes the caller's top-k ids itself (moe_route_topk's work: pair p =
// t·k + s of the chunk from topk_ids / topk_weights at pair first_pair + p, expert_map
// [num_global]) into pair_expert and pair_weight: one launch fewer for few tokens.
// counts [3 · num_local] local scratch: per expert its pair count, next slot and first tile.
// done [done_count] is zeroed (moe_mma_fc2's completion counts of its blocks of rows).
#define MOE_SORT_BLOCK 2048
__kernel void moe_sort(__global int* pair_expert, int num_pairs, int num_local, int tile_m, __local int* counts,
                       __global int* pair_slot, __global int* slot_pair, __global int* tiles,
                       __global int* chunk_info, __global int* status, int route_fused,
                       __global const int* topk_ids, __global const float* topk_weights, int first_pair,
                       int num_global, __global const int* expert_map, __global float* pair_weight,
                       __global int* done, int done_count) {
  __local int block[MOE_SORT_BLOCK];
  const int lid = get_local_id(0), size = get_local_size(0);
  for (int i = lid; i < done_count; i += size) done[i] = 0;
  __local int* count = counts;
  __local int* next_slot = counts + num_local;
  __local int* first_tile = counts + 2 * num_local;
  for (int e = lid; e < num_local; e += size) count[e] = 0;
  // Pass 1: route (route_fused) and count.
  for (int b0 = 0; b0 < num_pairs; b0 += MOE_SORT_BLOCK) {
    const int n = min(MOE_SORT_BLOCK, num_pairs - b0);
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous block is consumed
    for (int q = lid; q < n; q += size) {
      const int p = b0 + q;
      int e;
      if (route_fused) {
        const long g = (long)first_pair + p;
        e = moe_map_expert(topk_ids[g], num_global, expert_map, num_local, g, status);
        pair_expert[p] = e;
        pair_weight[p] = topk_weights[g];
      } else {
        e = pair_expert[p];
      }
      block[q] = e;
      if (e < 0) pair_slot[p] = -1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < num_local; e += size) {
      int c = 0;
      for (int q = 0; q < n; ++q) c += block[q] == e;
      count[e] += c;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    int slot = 0, tile = 0;
    for (int e = 0; e < num_local; ++e) {
      const int c = count[e];
      next_slot[e] = slot;
      first_tile[e] = tile;
      slot += c;
      tile += (c + tile_m - 1) / tile_m;
    }
    chunk_info[0] = tile;
    chunk_info[1] = slot;
    status[2] += tile;
    status[3] += slot;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < num_local; e += size) {
    const int base = next_slot[e], tile0 = first_tile[e], c = count[e];
    for (int i = 0; i * tile_m < c; ++i) {
      tiles[3 * (tile0 + i)] = e;
      tiles[3 * (tile0 + i) + 1] = base + i * tile_m;
      tiles[3 * (tile0 + i) + 2] = min(tile_m, c - i * tile_m);
    }
  }
  // Pass 2: slots in pair order per expert (one block: still in local memory).
  for (int b0 = 0; b0 < num_pairs; b0 += MOE_SORT_BLOCK) {
    const int n = min(MOE_SORT_BLOCK, num_pairs - b0);
    if (num_pairs > MOE_SORT_BLOCK) {
      barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);  // the previous block is consumed
      for (int q = lid; q < n; q += size) block[q] = pair_expert[b0 + q];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < num_local; e += size) {
      int slot = next_slot[e];
      for (int q = 0; q < n; ++q) {
        if (block[q] == e) {
          slot_pair[slot] = b0 + q;
          pair_slot[b0 + q] = slot;
          ++slot;
        }
      }
      next_slot[e] = slot;
    }
  }
}

// One block of a token's row as fp32, quantized under W4A4 (NVFP4: with expert e's input scale,
// fc1_input_scale[e]; read only there).
inline void moe_gather_block(__global const ushort* src, __global const float* fc1_input_scale, int e,
                             __global float* dst) {
#if MOE_W4A4 && defined(MOE_NVFP4)
  // The block as one float16 (moe_quantize16: the values of moe_quantize_block).
  vstore16(moe_quantize16(bf16x16(src, 0), fc1_input_scale[e]), 0, dst);
#elif MOE_W4A4
  (void)fc1_input_scale, (void)e;
  float v[MOE_QUANT_BLOCK];
  for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = bf16_to_float(src[i]);
  moe_quantize_block(v, 1.0f, dst);  // MXFP4: no global scale
#else
  (void)fc1_input_scale, (void)e;
  for (int i = 0; i < MOE_QUANT_BLOCK; ++i) dst[i] = bf16_to_float(src[i]);
#endif
}
// The same values as BF16 pairs (exact), dst [MOE_QUANT_BLOCK / 2]: the MMA kernels' B fragments.
inline void moe_gather_block_pairs(__global const ushort* src, __global const float* fc1_input_scale, int e,
                                   __global uint* dst) {
#if MOE_W4A4
#ifdef MOE_NVFP4
  const float gs = fc1_input_scale[e];
#else
  const float gs = 1.0f;  // MXFP4: no global scale
  (void)fc1_input_scale, (void)e;
#endif
  moe_quantize_bf16_pairs(src, gs, dst);
#else
  (void)fc1_input_scale, (void)e;
  for (int i = 0; i < MOE_QUANT_BLOCK / 2; ++i) dst[i] = ((const __global uint*)src)[i];
#endif
}

// One work-item per (block of the hidden dimension, slot): x1 [slots, H] fp32 and, with pack = 1,
// x1q [slots, H/2]: the same values as the BF16 pairs that moe_fc1's BF16 dot products read
// (moe_bf16_quads16, common/bf16_dot.cl), or with MOE_INT_CODES their integer form (moe_quant.cl). With bf16_rows = 1 (moe_mma_fc1's) x1 holds BF16 rows
// instead, [slots, H] as pairs (element 2i in the low half of word i), and pack is 0.
__kernel void moe_gather(__global const ushort* x, int hidden, int top_k, int token_offset,
                         __global const int* slot_pair, __global const int* pair_expert,
                         __global const int* chunk_info, __global const float* fc1_input_scale, __global float* x1,
                         __global uint* x1q, int pack, int bf16_rows) {
  const int b = get_global_id(0), slot = get_global_id(1);
  if (slot >= chunk_info[1] || b * MOE_QUANT_BLOCK >= hidden) return;
  const int pair = slot_pair[slot];
  const __global ushort* src = x + ((long)token_offset + pair / top_k) * hidden + b * MOE_QUANT_BLOCK;
  if (bf16_rows) {
    moe_gather_block_pairs(src, fc1_input_scale, pair_expert[pair],
                           (__global uint*)x1 + ((long)slot * hidden + b * MOE_QUANT_BLOCK) / 2);
    return;
  }
  __global float* dst = x1 + (long)slot * hidden + b * MOE_QUANT_BLOCK;
#if defined(MOE_INT_CODES) && MOE_W4A4
  // The integer dot products' form beside x1 (moe_quant.cl, moe_int_store_codes16), a block of 16
  // elements at a time (an MXFP4 block is two).
  if (pack) {
    float16 v[MOE_QUANT_BLOCK / 16], q[MOE_QUANT_BLOCK / 16];
    for (int c = 0; c < MOE_QUANT_BLOCK / 16; ++c) v[c] = bf16x16(src, c);
#ifdef MOE_NVFP4
    const float gs = fc1_input_scale[pair_expert[pair]];
#else
    const float gs = 1.0f;  // MXFP4: no global scale
#endif
    float s;
    moe_quantize_block16s_e2m1(v, gs, q, &s);
    __global uint* row = x1q + (long)slot * (hidden / 2);
    for (int c = 0; c < MOE_QUANT_BLOCK / 16; ++c) {
      vstore16(q[c] * s, c, dst);
      moe_int_store_codes16(q[c], s, row, hidden, b * (MOE_QUANT_BLOCK / 16) + c);
    }
    return;
  }
#endif
  moe_gather_block(src, fc1_input_scale, pair_expert[pair], dst);
#if defined(MOE_INT_PLANES) && !MOE_W4A4
  // W4A16's integer planes beside x1 (moe_int_planes.cl): FC1's chunks are 16 elements (an MXFP4
  // block is two).
  if (pack) {
    __global uint* row = x1q + (long)slot * MOE_IP_ROW(hidden, 16);
    for (int c = 0; c < MOE_QUANT_BLOCK / 16; ++c)
      moe_ip_store16(vload16(c, dst), row, hidden, b * (MOE_QUANT_BLOCK / 16) + c);
    return;
  }
#endif
#if defined(MOE_SCALED_X) && !MOE_W4A4
  // W4A16's scaled form beside x1 (moe_scaled_x.cl), 8-element chunks 2b .. 2b + MOE_QUANT_BLOCK / 8 - 1.
  if (pack) {
    __global float* row = (__global float*)x1q + (long)slot * MOE_SX_ROW(hidden);
    for (int c = 0; c < MOE_QUANT_BLOCK / 8; ++c)
      moe_sx_store8(vload8(c, dst), row, hidden, b * (MOE_QUANT_BLOCK / 8) + c);
    return;
  }
#endif
  if (pack)
    for (int c = 0; c < MOE_QUANT_BLOCK / 16; ++c)
      vstore8(moe_bf16_quads16(as_uint16(vload16(c, dst))), c, x1q + (long)slot * (hidden / 2) + b * (MOE_QUANT_BLOCK / 2));
}

// The same without moe_sort, for moe_mma_fc1's routed chunks (MMA_ROUTED): one work-item per
// (block, pair), x1 [pairs, H] BF16 rows by pair (as moe_gather's bf16_rows); the pair's local
// expert from the caller's top-k ids (route_fused) or from pair_expert (the logit router's); pairs
// with none are skipped.
__kernel void moe_gather_pairs(__global const ushort* x, int hidden, int top_k, int token_offset, int route_fused,
                               __global const int* topk_ids, int num_global, __global const int* expert_map,
                               int num_local, __global const int* pair_expert,
                               __global const float* fc1_input_scale, __global uint* x1) {
  const int b = get_global_id(0), pair = get_global_id(1);
  if (b * MOE_QUANT_BLOCK >= hidden) return;
  const int e = route_fused ? moe_local_expert(topk_ids[(long)token_offset * top_k + pair], num_global, expert_map,
                                               num_local)
                            : pair_expert[pair];
  if (e < 0) return;
  moe_gather_block_pairs(x + ((long)token_offset + pair / top_k) * hidden + b * MOE_QUANT_BLOCK, fc1_input_scale, e,
                         x1 + ((long)pair * hidden + b * MOE_QUANT_BLOCK) / 2);
}
