// The mma strategy's tiles (kernels/moe_mma.cl, which includes this file after its geometry
// macros: MMA_ROWS, MMA_RT, MMA_MT, MMA_KSPLIT, MMA_LOCAL, MMA_ROW_LOOP, MMA_ROUTED,
// MMA_ROUTE_TILE): where a work-item works (its work-group's tile of pairs of one expert, its
// block of rows, its warp's row tile and K slice), from moe_sort's tiles or, in routed chunks,
// found by each work-group itself.
#ifndef FP4CL_MOE_MMA_TILES_CL
#define FP4CL_MOE_MMA_TILES_CL

// Where a work-item works: its work-group's tile (expert e, slots start .. start + count - 1),
// rows row0 .. row0 + MMA_ROWS - 1 of the GEMM, and its warp's row tile and K slice.
typedef struct {
  int e, start, count, lane, warp, rt_local, ks, g, t, row0, chunks, per_warp;
  long first;  // the index of the warp's first chunk in the MMA layout: (row tile · chunks + K slice start);
               // its row tile q (< MMA_MT) is q · chunks further
} mma_place_t;

// Points *p at block `block` of MMA_ROWS rows (of a GEMM with `rows` rows per expert).
inline void mma_place_rows(mma_place_t* p, int block, int rows) {
  p->row0 = block * MMA_ROWS;
  const long rt = ((long)p->e * rows + p->row0) / 16 + p->rt_local * MMA_MT;
  p->first = rt * p->chunks + p->ks * p->per_warp;
}

// Fills *p for tile (expert e, slots start .. start + count - 1) of a GEMM with `rows` rows per
// expert and K = k_len, at block `block` of rows (the work-group's first of MMA_ROW_LOOP).
inline void mma_place_at(mma_place_t* p, int e, int start, int count, int rows, int k_len, int block) {
  p->e = e;
  p->start = start;
  p->count = count;
  const int lid = get_local_id(0);
  p->lane = lid % 32;
  p->warp = lid / 32;
  p->rt_local = p->warp % MMA_RT;
  p->ks = p->warp / MMA_RT % MMA_KSPLIT;  // MMA_TOKEN_SUM: warp / MMA_WARPS is the pair
  p->g = p->lane / 4;
  p->t = p->lane % 4;
  p->chunks = k_len / 64;
  p->per_warp = p->chunks / MMA_KSPLIT;
  mma_place_rows(p, block, rows);
}
// The same for moe_sort's tile get_group_id(1); 0 when the work-group has none (uniform).
inline int mma_place(mma_place_t* p, __global const int* tiles, __global const int* chunk_info, int rows, int k_len) {
  const int tile = get_group_id(1);
  if (tile >= chunk_info[0]) return 0;
  mma_place_at(p, tiles[3 * tile], tiles[3 * tile + 1], tiles[3 * tile + 2], rows, k_len,
               get_group_id(0) * MMA_ROW_LOOP);
  return 1;
}

#if MMA_ROUTED
// Chunks of at most MMA_ROUTE_PAIRS pairs (few tokens) without moe_sort: tile p (grid dimension
// 1) is led by pair p. Its expert's pairs (expert [pairs], local: the pairs' local experts, -1
// for none) meet as a bit mask in local memory (one atomic_or each); when p's rank among them is
// a multiple of MMA_ROUTE_TILE, the tile is p and the expert's next pairs in pair order, at most
// MMA_ROUTE_TILE, listed in `list` (its slots 0 .. count - 1), else p leads none. With tiles of
// MMA_TOKENS, moe_sort's tiles in another order; slots are pairs (x1, x2 and y rows by pair).
// Called by the whole work-group after `expert` is filled and a barrier; 0 when p leads no tile
// (uniform).
#define MMA_ROUTE_PAIRS 64
// The rank of pair q among the pairs in mask (m0: pairs 0..31, m1: 32..63).
inline int mma_route_rank(uint m0, uint m1, int q) {
  return q < 32 ? popcount(m0 & ((1u << q) - 1u)) : popcount(m0) + popcount(m1 & ((1u << (q - 32)) - 1u));
}
inline int mma_route_tile(mma_place_t* pl, int num_pairs, __local const int* expert, __local uint* mask,
                          __local int* list, int rows, int k_len) {
  const int lid = get_local_id(0), p = get_group_id(1), e = expert[p];
  if (e < 0) return 0;  // uniform
  for (int q = lid; q < num_pairs; q += MMA_LOCAL)
    if (expert[q] == e) atomic_or(&mask[q / 32], 1u << (q % 32));
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint m0 = mask[0], m1 = mask[1];
  const int r = mma_route_rank(m0, m1, p);
  if (r % MMA_ROUTE_TILE != 0) return 0;  // uniform
  const int count = min(MMA_ROUTE_TILE, (int)(popcount(m0) + popcount(m1)) - r);
  for (int q = lid; q < num_pairs; q += MMA_LOCAL) {
    const int rq = mma_route_rank(m0, m1, q);
    if (expert[q] == e && rq >= r && rq < r + count) list[rq - r] = q;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  mma_place_at(pl, e, 0, count, rows, k_len, get_group_id(0) * MMA_ROW_LOOP);
  return 1;
}
#endif

#endif  // FP4CL_MOE_MMA_TILES_CL
