// The mma strategy's activations (kernels/moe_mma.cl, which includes this file after its
// geometry macros and kernels/moe_mma_tiles.cl): the rows of x1 / x2 or of the caller's input a
// tile multiplies, read as BF16 pairs (B fragment registers) from global memory, or staged in
// local memory.
#ifndef FP4CL_MOE_MMA_ACTIVATIONS_CL
#define FP4CL_MOE_MMA_ACTIVATIONS_CL

// The activations, BF16 rows read as pairs (a pair is a B fragment register as it is): x1 / x2
// [slots, K] (moe_gather's or moe_gather_pairs', moe_mma_fc1's), or with MMA_X_DIRECT the
// caller's rows x [tokens, H] (a slot's token: token_offset + slot_pair[slot] / top_k), or with
// MMA_X_LOCAL the tile's one token quantized into local memory. mma_x_pair(row, p) = elements 2p
// (low half) and 2p + 1; mma_x_pairs8(row, p0, b): pairs p0 .. p0 + 7 into b[0..7]
// (common/fp4_mma.cl's mma_b8_bf16*).
// The pair of a slot: slots are pairs when every pair is its own tile (MMA_PER_PAIR); a routed
// tile (MMA_ROUTED) lists its pairs in local memory, its slots 0 .. count - 1.
#if MMA_ROUTED
typedef __local const int mma_slots_t;
#else
typedef __global const int mma_slots_t;
#endif
inline int mma_pair_of(mma_slots_t* slot_pair, int slot) {
#if MMA_PER_PAIR || MMA_TOKEN_SUM
  return slot;
#else
  return slot_pair[slot];
#endif
}
#if MMA_X_LOCAL
typedef __local const uint mma_x_t;  // the tile's tokens, quantized: [MMA_X_TOKENS, K / 2] pairs
typedef __local const uint* mma_row_t;
inline mma_row_t mma_row(mma_x_t* x, int k_len, int slot, mma_slots_t* slot_pair, int top_k, int token_offset) {
  return MMA_X_TOKENS > 1 ? x + slot * (MMA_HIDDEN / 2) : x;  // routed: slot m of the tile (start 0)
}
inline void mma_x_pairs8(mma_row_t row, int p0, uint* b) { mma_b8_bf16_local(row, p0, b); }
#else
typedef __global const ushort mma_x_t;
typedef __global const uint* mma_row_t;
inline mma_row_t mma_row(mma_x_t* x, int k_len, int slot, mma_slots_t* slot_pair, int top_k, int token_offset) {
#if MMA_X_DIRECT
  const long r = (long)token_offset + mma_pair_of(slot_pair, slot) / top_k;
#elif MMA_ROUTED
  const long r = slot_pair[slot];  // rows by pair (moe_gather_pairs', moe_mma_fc1's)
#else
  const long r = slot;
#endif
  return (mma_row_t)(x + r * k_len);
}
inline void mma_x_pairs8(mma_row_t row, int p0, uint* b) { mma_b8_bf16(row, p0, b); }
#endif
inline uint mma_x_pair(mma_row_t row, int p) { return row[p]; }

// The row of x2 (FC1's output, FC2's input) of slot s: its pair when slots are listed per tile.
inline int mma_x2_row(mma_slots_t* slot_pair, int s) {
#if MMA_ROUTED
  return slot_pair[s];
#else
  return s;
#endif
}

// The B fragments of chunk c (of the whole K) of every MMA of 8 tokens from global memory: b[nt]
// = the lane's pairs 8t .. 8t + 7 of the chunk (b[nt][2j], b[nt][2j + 1] feed MMA j).
inline void mma_b_global(const mma_row_t* xr, int c, int t, uint b[MMA_NT][8]) {
MMA_UNROLLED
  for (int nt = 0; nt < MMA_NT; ++nt) mma_x_pairs8(xr[nt], 32 * c + 8 * t, b[nt]);
}
// The same from the staged activations (xw: the lane's token row of its K slice, offset by 8t;
// 16-byte aligned: the row stride and 8t are multiples of 4 words): chunk cc of the stage.
inline void mma_b_local(const __local uint* xw, int cc, uint b[MMA_NT][8]) {
MMA_UNROLLED
  for (int nt = 0; nt < MMA_NT; ++nt) {
    const __local uint4* v = (const __local uint4*)(xw + nt * 8 * MMA_XSTRIDE + cc * 32);
    const uint4 u0 = v[0], u1 = v[1];
    b[nt][0] = u0.x, b[nt][1] = u0.y, b[nt][2] = u0.z, b[nt][3] = u0.w;
    b[nt][4] = u1.x, b[nt][5] = u1.y, b[nt][6] = u1.z, b[nt][7] = u1.w;
  }
}

// Stages chunks [s0, s0 + n) of every K slice (slice ks starts at chunk ks · per_warp) of the
// tile's tokens as BF16 pairs: xs[(ks · MMA_TOKENS + m) · MMA_XSTRIDE + q] = pair q of the
// staged range. Called by the whole work-group between barriers.
inline void mma_stage(__local uint* xs, mma_x_t* x, int k_len, const mma_place_t* pl, mma_slots_t* slot_pair,
                      int top_k, int token_offset, int s0, int n) {
  const int pairs = 32 * n, per_slice = MMA_TOKENS * pairs;
  for (int i = get_local_id(0); i < MMA_KSPLIT * per_slice; i += MMA_LOCAL) {
    const int ks = i / per_slice, m = (i % per_slice) / pairs, q = i % pairs;
    const mma_row_t row = mma_row(x, k_len, pl->start + min(m, pl->count - 1), slot_pair, top_k, token_offset);
    xs[(ks * MMA_TOKENS + m) * MMA_XSTRIDE + q] = mma_x_pair(row, 32 * (ks * pl->per_warp + s0) + q);
  }
}

#endif  // FP4CL_MOE_MMA_ACTIVATIONS_CL
