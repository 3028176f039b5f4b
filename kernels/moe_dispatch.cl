// MoE dispatch: group the chunk's (token, slot) pairs by expert without any dependence on
// thread timing (moe_sort), then gather each pair's activations in that order as fp32 —
// quantized per block first under W4A4 (moe_gather).
//
// Build-time parameters: MOE_W4A4, MOE_NVFP4 (else MXFP4).
//
// Layouts written here and read by moe_fc1/moe_fc2:
//   slot_pair [pairs]  the pair at each slot: slots sorted by (local expert, pair index)
//   pair_slot [pairs]  its inverse, -1 for pairs with no local expert
//   tiles [3·max_tiles] (expert, first slot, pair count <= tile_m) per tile, experts ascending
//   chunk_info [2]     number of tiles, number of slots (pairs with a local expert)
//   status [4]         [2] += tiles, [3] += slots (statistics of the whole call)
#include "common/formats.cl"
#include "moe_expert_map.cl"
#include "moe_quant.cl"

// A counting sort in one work-group. Each work-item owns experts e = lid, lid + size, ... and
// scans the pairs in index order, so every slot position is a function of the input alone.
// route_fused = 1: first routes the caller's top-k ids itself (moe_route_topk's work: pair p =
// t·k + s of the chunk from topk_ids / topk_weights at pair first_pair + p, expert_map
// [num_global]) into pair_expert and pair_weight: one launch fewer for few tokens.
// counts [3 · num_local] local scratch: per expert its pair count, first slot and first tile
// (local memory: the serial prefix over the experts costs ~1 µs there instead of ~10 µs from
// global memory on an H100).
__kernel void moe_sort(__global int* pair_expert, int num_pairs, int num_local, int tile_m, __local int* counts,
                       __global int* pair_slot, __global int* slot_pair, __global int* tiles,
                       __global int* chunk_info, __global int* status, int route_fused,
                       __global const int* topk_ids, __global const float* topk_weights, int first_pair,
                       int num_global, __global const int* expert_map, __global float* pair_weight) {
  const int lid = get_local_id(0), size = get_local_size(0);
  __local int* count = counts;
  __local int* base_slot = counts + num_local;
  __local int* base_tile = counts + 2 * num_local;
  if (route_fused) {
    for (int p = lid; p < num_pairs; p += size) {
      const long g = (long)first_pair + p;
      pair_expert[p] = moe_map_expert(topk_ids[g], num_global, expert_map, num_local, g, status);
      pair_weight[p] = topk_weights[g];
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  for (int e = lid; e < num_local; e += size) {
    int c = 0;
    for (int p = 0; p < num_pairs; ++p) c += pair_expert[p] == e;
    count[e] = c;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    int slot = 0, tile = 0;
    for (int e = 0; e < num_local; ++e) {
      const int c = count[e];
      base_slot[e] = slot;
      base_tile[e] = tile;
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
    const int base = base_slot[e], tile0 = base_tile[e], c = count[e];
    int j = 0;
    for (int p = 0; p < num_pairs && j < c; ++p) {
      if (pair_expert[p] == e) {
        slot_pair[base + j] = p;
        pair_slot[p] = base + j;
        ++j;
      }
    }
    for (int i = 0; i * tile_m < c; ++i) {
      tiles[3 * (tile0 + i)] = e;
      tiles[3 * (tile0 + i) + 1] = base + i * tile_m;
      tiles[3 * (tile0 + i) + 2] = min(tile_m, c - i * tile_m);
    }
  }
  for (int p = lid; p < num_pairs; p += size) {
    if (pair_expert[p] < 0) pair_slot[p] = -1;
  }
}

// One work-item per (block of the hidden dimension, slot): x1 [slots, H] fp32.
__kernel void moe_gather(__global const ushort* x, int hidden, int top_k, int token_offset,
                         __global const int* slot_pair, __global const int* pair_expert,
                         __global const int* chunk_info, __global const float* fc1_input_scale, __global float* x1) {
  const int b = get_global_id(0), slot = get_global_id(1);
  if (slot >= chunk_info[1] || b * MOE_QUANT_BLOCK >= hidden) return;
  const int pair = slot_pair[slot];
  const __global ushort* src = x + ((long)token_offset + pair / top_k) * hidden + b * MOE_QUANT_BLOCK;
  __global float* dst = x1 + (long)slot * hidden + b * MOE_QUANT_BLOCK;
#if MOE_W4A4
  float v[MOE_QUANT_BLOCK];
  for (int i = 0; i < MOE_QUANT_BLOCK; ++i) v[i] = bf16_to_float(src[i]);
#ifdef MOE_NVFP4
  moe_quantize_block(v, fc1_input_scale[pair_expert[pair]], dst);
#else
  moe_quantize_block(v, 1.0f, dst);
#endif
#else
  for (int i = 0; i < MOE_QUANT_BLOCK; ++i) dst[i] = bf16_to_float(src[i]);
#endif
}
