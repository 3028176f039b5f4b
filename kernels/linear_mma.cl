// FP4 linear on tensor cores (the `mma` strategy): y[m, n] = x[m, :] · W[n, :] as m16n8k16 BF16
// MMAs with fp32 accumulation (common/fp4_mma.cl) over W in the MMA layout
// (host/prepare/fp4_mma_layout.hpp: the linear weight is one "expert" of N rows), the design of
// moe_mma.cl's unstaged K loop for one matrix.
//
// Geometry. Weight rows are the MMA's M dimension (a warp owns a row tile of 16 rows), tokens
// its N dimension (MMA_NT MMAs of 8 tokens per k16 step: a token tile of 8·MMA_NT tokens; more
// tokens, more token tiles in grid dimension 1). A work-group of MMA_RT · MMA_KSPLIT warps owns
// MMA_RT · MMA_MT row tiles and one token tile: warp (rt, ks) multiplies the MMA_MT row tiles
// rt · MMA_MT .. rt · MMA_MT + MMA_MT - 1 (each B fragment serves them all: prefill) over the ks-th
// of MMA_KSPLIT equal slices of K (MMA_KSPLIT divides K / 64; the host checks). Per chunk of 64
// elements of K a lane loads one uint4 of codes (the A fragments of the chunk's four MMAs: its
// elements 16t .. 16t + 15, one block, in the MMA layout's k map) and its block scales,
// MMA_UNROLL chunks ahead of their MMAs (a warp: 512 contiguous bytes of codes a chunk).
// Activations are read as B fragments straight from global memory: BF16 rows [M, K], a BF16 pair
// being a fragment register as it is: the caller's input (W4A16), or under W4A4 the rows of
// linear_activations.cl's linear_quantize_fp4_bf16 (e2m1 × block scale, exact in BF16: the
// values FP4.md §3 / §4 define). With MMA_X_QUANT (W4A4 calls of at most MMA_X_QUANT tokens,
// decode) the kernel quantizes the caller's BF16 rows itself instead, into local memory as BF16
// pairs of e2m1 × block scale with the same recipe (moe_quant.cl; the pre-pass's values, one
// launch fewer): every work-group quantizes all of the call's tokens, MMA_K elements each. Tokens past M
// repeat the last one (computed, not stored).
//
// Exactness: the MMA multiplies exact values (common/fp4_mma.cl) and accumulates in fp32.
// Reduction (deterministic): the K slices' partial sums meet in local memory and one work-item per
// (row, token) adds them in slice order. A token's result depends neither on the other tokens of
// the call nor on MMA_NT (the MMA's columns are independent); MMA_KSPLIT comes from the shape.
// Epilogue: fp4_store_output (common/fp4_dot.cl): y = sum × epilogue (+ bias[n]), fp32 or BF16
// (RNE); the host folds alpha (the global scales) and 2^-(scale_exp - 126) (the decode's powers
// of two) into `epilogue`.
//
// Build options:
//   FP4CL_FORMAT_MXFP4   1 MXFP4, 0 NVFP4
//   FP4_MMA_PTX          1: inline PTX mma.sync (NVIDIA, compute capability >= 8.0); 0: the
//                        portable emulation (common/fp4_mma.cl)
//   MMA_NT               MMAs of 8 tokens per k16 step (a token tile of 8·MMA_NT tokens)
//   MMA_RT               warps along the rows per work-group
//   MMA_MT               row tiles of 16 rows per warp (default 1)
//   MMA_KSPLIT           warps splitting K per row tile (divides K / 64)
//   MMA_UNROLL           chunks loaded before their MMAs
//   MMA_X_QUANT, MMA_K   W4A4 in the kernel: up to MMA_X_QUANT tokens of MMA_K (= K) elements
//                        quantized into local memory (MMA_NT 1; needs exact fp32 division for
//                        NVFP4: host/cl/exact_division.hpp)
// Launch: global (N / (16 · MMA_RT · MMA_MT) · 32 · MMA_RT · MMA_KSPLIT, ceil(M / (8 · MMA_NT))),
//         local (32 · MMA_RT · MMA_KSPLIT, 1).
#if !FP4CL_FORMAT_MXFP4
#define FP4_MMA_NVFP4
#define MOE_NVFP4  // moe_quant.cl's NVFP4 recipe
#endif
#include "common/fp4_dot.cl"
#include "common/fp4_mma.cl"
#ifndef MMA_X_QUANT
#define MMA_X_QUANT 0
#endif
#if MMA_X_QUANT
#include "moe_quant.cl"
#endif

#ifndef MMA_UNROLL
#define MMA_UNROLL 1
#endif
#ifndef MMA_MT
#define MMA_MT 1
#endif
// Loops containing MMAs unrolled on tensor cores, kept as loops where the MMA is emulated (less
// code for PoCL to compile).
// On tensor cores the chunk's MMAs are also forced inline (a call would put the accumulators and
// the loaded words in memory: clang's PTX keeps them in registers only so).
#if FP4_MMA_PTX
#define MMA_UNROLLED _Pragma("unroll")
#define MMA_CHUNK_INLINE static __attribute__((always_inline)) inline
#else
#define MMA_UNROLLED _Pragma("unroll 1")
#define MMA_CHUNK_INLINE inline
#endif
#define MMA_WARPS (MMA_RT * MMA_KSPLIT)
#define MMA_LOCAL (32 * MMA_WARPS)
#define MMA_TILES (MMA_RT * MMA_MT)  // row tiles of 16 a work-group
#define MMA_ROWS (16 * MMA_TILES)
#define MMA_TOKENS (8 * MMA_NT)

// A token's activations: x_pairs8(row, p0, b) = its BF16 pairs p0 .. p0 + 7 (elements 2p in the
// low half, 2p + 1 in the high; p0 a multiple of 8: 16-byte loads), the lane's B fragments of a
// chunk (b[2j], b[2j + 1] feed MMA j: the MMA layout's k map). BF16 rows in global memory, or
// (MMA_X_QUANT) the quantized rows in local memory.
#if MMA_X_QUANT
typedef __local const uint* x_row_t;
inline void x_pairs8(x_row_t row, int p0, uint* b) { mma_b8_bf16_local(row, p0, b); }
#else
typedef __global const uint* x_row_t;
inline void x_pairs8(x_row_t row, int p0, uint* b) { mma_b8_bf16(row, p0, b); }
#endif

#if FP4_MMA_PTX
typedef char linear_mma_emulation_t;  // nothing: the lanes' fragments meet in the tensor core
#else
// What the emulated MMAs read besides the lane's own fragments: the codes (the lane's word of its
// first row tile; its quad's are beside it, row tile q is q · chunks chunks further) and the rows
// of the tokens of the lane's two C columns (2t + h of each MMA of 8 tokens).
typedef struct {
  __global const uint4* wp;
  long chunks;
  x_row_t xc[2][MMA_NT];
} linear_mma_emulation_t;
#endif

// The MMAs of chunk c (of the whole K) of the warp's row tiles with every MMA of 8 tokens: codes
// wv[q], scales sv[q] of row tile q (the lane's are one block's); xr[nt]: the row of the lane's
// token of MMA nt; its pairs from p0 = 32 · (the K slice's first chunk) + 8t.
MMA_CHUNK_INLINE void linear_mma_chunk(const uint4* wv, const mma_scales_t* sv, int scale_exp, const x_row_t* xr,
                                        int p0, int c, float acc[MMA_MT][MMA_NT][4], int lane,
                                        const linear_mma_emulation_t* em) {
#if !FP4_MMA_PTX
  // Emulated (common/fp4_mma.cl, fp4_mma_chunk_emulated): the fragments of the lane's quad and of
  // its columns' lanes, each made as that lane makes its own.
  (void)wv, (void)xr;
  const int t = lane % 4;
  uint aq[4 * 4 * MMA_MT * 4], bq[2 * 4 * MMA_NT * 8];
  for (int q = 0; q < MMA_MT; ++q)
    mma_quad_fragments(em->wp + ((long)q * em->chunks + c) * 32, sv[q], t, scale_exp, q, MMA_MT, aq);
  for (int tq = 0; tq < 4; ++tq)
    for (int h = 0; h < 2; ++h)
      for (int nt = 0; nt < MMA_NT; ++nt)
        x_pairs8(em->xc[h][nt], p0 - 8 * t + 8 * tq + 32 * c, bq + ((h * 4 + tq) * MMA_NT + nt) * 8);
  fp4_mma_chunk_emulated(&acc[0][0][0], aq, bq, MMA_MT, MMA_NT);
#else
  (void)em;
  uint b[MMA_NT][8];
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) x_pairs8(xr[nt], p0 + 32 * c, b[nt]);
  uint lo[MMA_MT], hi[MMA_MT];
#pragma unroll
  for (int q = 0; q < MMA_MT; ++q) mma_lane_scales(sv[q], lane % 4, scale_exp, &lo[q], &hi[q]);
MMA_UNROLLED
  for (int j = 0; j < 4; ++j) {
    uint a[MMA_MT][4];
MMA_UNROLLED
    for (int q = 0; q < MMA_MT; ++q) mma_fragment(mma_word(wv[q], j), lo[q], hi[q], a[q]);
MMA_UNROLLED
    for (int nt = 0; nt < MMA_NT; ++nt)
MMA_UNROLLED
      for (int q = 0; q < MMA_MT; ++q) FP4_MMA(acc[q][nt], a[q], b[nt][2 * j], b[nt][2 * j + 1]);
  }
#endif
}

//   w [N/16, K/64, 32] uint4, ws its block scales (MMA layout); x [M, K] BF16 (the caller's input
//   or the W4A4 pre-pass's rows); y [M, N] fp32 or BF16 (out_bf16); bias [N] fp32 (has_bias);
//   gs: the NVFP4 activations' quant-direction global scale (MMA_X_QUANT only)
__kernel __attribute__((reqd_work_group_size(MMA_LOCAL, 1, 1))) void linear_mma(
    __global const uint4* restrict w, __global const mma_scales_t* restrict ws, __global const uint* restrict x,
    __global uchar* restrict y, __global const float* restrict bias, int n, int k, int m, int scale_exp,
    float epilogue, int has_bias, int out_bf16, float gs) {
  __local float part[MMA_KSPLIT * MMA_TILES * MMA_NT * 128];
  const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;
  const int rt_local = warp % MMA_RT, ks = warp / MMA_RT, g = lane / 4, t = lane % 4;
  const int row0 = get_group_id(0) * MMA_ROWS, tok0 = get_group_id(1) * MMA_TOKENS;
  const int chunks = k / 64, per_warp = chunks / MMA_KSPLIT, c0 = ks * per_warp;
  // The warp's first chunk of its first row tile in the MMA layout: (row tile · chunks + K slice
  // start); row tile q is q · chunks further.
  const long first = (long)(row0 / 16 + rt_local * MMA_MT) * chunks + c0;
  __global const uint4* wp = w + first * 32 + lane;
  __global const mma_scales_t* sp = ws + first * 8 + g;
#if MMA_X_QUANT
  // The call's tokens (m ≤ MMA_X_QUANT), quantized per block (the pre-pass's values) as BF16 pairs.
  __local uint xq[MMA_X_QUANT * MMA_K / 2] __attribute__((aligned(16)));
  for (int b = lid; b < m * (MMA_K / MOE_QUANT_BLOCK); b += MMA_LOCAL) {
    const int token = b / (MMA_K / MOE_QUANT_BLOCK), e0 = (b % (MMA_K / MOE_QUANT_BLOCK)) * MOE_QUANT_BLOCK;
    moe_quantize_bf16_pairs_local((const __global ushort*)x + (long)token * MMA_K + e0, gs,
                                  xq + (token * MMA_K + e0) / 2);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#else
  (void)gs;
#endif
  x_row_t xr[MMA_NT];
  float acc[MMA_MT][MMA_NT][4];
  const int p0 = 32 * c0 + 8 * t;
#pragma unroll
  for (int nt = 0; nt < MMA_NT; ++nt) {
#if MMA_X_QUANT
    xr[nt] = xq + min(tok0 + 8 * nt + g, m - 1) * (MMA_K / 2);
#else
    xr[nt] = x + (long)min(tok0 + 8 * nt + g, m - 1) * (k / 2);
#endif
#pragma unroll
    for (int q = 0; q < MMA_MT; ++q)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[q][nt][r] = 0.0f;
  }
  linear_mma_emulation_t em;
#if !FP4_MMA_PTX
  em.wp = wp;
  em.chunks = chunks;
  for (int h = 0; h < 2; ++h)
    for (int nt = 0; nt < MMA_NT; ++nt)
#if MMA_X_QUANT
      em.xc[h][nt] = xq + min(tok0 + 8 * nt + 2 * t + h, m - 1) * (MMA_K / 2);
#else
      em.xc[h][nt] = x + (long)min(tok0 + 8 * nt + 2 * t + h, m - 1) * (k / 2);
#endif
#endif
  uint4 wv[MMA_UNROLL][MMA_MT];
  mma_scales_t sv[MMA_UNROLL][MMA_MT];
  int c = 0;
  for (; c + MMA_UNROLL <= per_warp; c += MMA_UNROLL) {
#pragma unroll
    for (int u = 0; u < MMA_UNROLL; ++u)
#pragma unroll
      for (int q = 0; q < MMA_MT; ++q) {
        wv[u][q] = wp[((long)q * chunks + c + u) * 32];
        sv[u][q] = sp[((long)q * chunks + c + u) * 8];
      }
MMA_UNROLLED
    for (int u = 0; u < MMA_UNROLL; ++u) linear_mma_chunk(wv[u], sv[u], scale_exp, xr, p0, c + u, acc, lane, &em);
  }
  for (; c < per_warp; ++c) {
#pragma unroll
    for (int q = 0; q < MMA_MT; ++q) {
      wv[0][q] = wp[((long)q * chunks + c) * 32];
      sv[0][q] = sp[((long)q * chunks + c) * 8];
    }
    linear_mma_chunk(wv[0], sv[0], scale_exp, xr, p0, c, acc, lane, &em);
  }

  // The K slices' partial sums, added in slice order by one work-item per (row, token). A C
  // fragment is stored register-major (register · 32 + lane): the stores hit 32 banks, and the
  // reads of neighbouring rows (lanes 4 apart) 8.
#pragma unroll
  for (int q = 0; q < MMA_MT; ++q)
#pragma unroll
    for (int nt = 0; nt < MMA_NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        part[((ks * MMA_TILES + rt_local * MMA_MT + q) * MMA_NT + nt) * 128 + r * 32 + lane] = acc[q][nt][r];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lid; i < MMA_ROWS * MMA_TOKENS; i += MMA_LOCAL) {
    const int mt = i / MMA_ROWS, r = i % MMA_ROWS, token = tok0 + mt;
    if (token >= m) break;  // i grows with the token: every later one is past M too
    const int ci = mma_c_index(r % 16, mt % 8);  // lane · 4 + register
    const int at = ((r / 16) * MMA_NT + mt / 8) * 128 + (ci % 4) * 32 + ci / 4;
    float h = 0.0f;
    for (int s = 0; s < MMA_KSPLIT; ++s) h += part[s * (MMA_TILES * MMA_NT * 128) + at];
    fp4_store_output(y, (ulong)token * n + row0 + r, h, epilogue, bias, has_bias, (uint)(row0 + r), out_bf16);
  }
}
