// Tensor-core building blocks of the MMA kernels (moe_mma.cl, linear_mma.cl): FP4 weights in the
// MMA layout (host/prepare/fp4_mma_layout.hpp) decoded straight into the A fragments of an
// m16n8k16 BF16 MMA with fp32 accumulation (PTX `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`).
//
// Fragments (PTX ISA, per lane = 4g + t of a 32-lane warp; each register two BF16, the lower
// index in the low half): A a_i = row g + 8·(i & 1), k 2t, 2t+1 (+8 when i >= 2); B b_0 = k 2t,
// 2t+1 of column g, b_1 = the same + 8; C c_r = row g + 8·(r >> 1), column 2t + (r & 1).
//
// Exactness. A weight is decoded as a BF16 number whose bits 8..6 are the E2M1 code's magnitude
// bits and bit 15 its sign bit, i.e. e2m1 × 2^-126 (a BF16 subnormal for |e2m1| < 2). The layout
// stores the codes so that few instructions place them there (fp4_mma_pair). Multiplied by
// the block scale |s| × 2^scale_exp (a BF16 number: E4M3 and E8M0 values have at most 4
// significant bits; a negative NVFP4 scale's sign is in its block's codes, host/prepare/
// fp4_mma_layout.hpp) it gives e2m1 × s × 2^(scale_exp - 126): at most 6 significant bits, a
// normal BF16 number for the scale_exp the host chose (the split layout's; FP4.md §1), exact.
// Activations are BF16 numbers (W4A16) or e2m1 × block scale (W4A4), exact in BF16 too, so the
// MMA multiplies exact values and accumulates in fp32 (the tensor core's order: not the scalar
// reference's, deterministic on a device). Measured on an H100 (NVIDIA OpenCL): BF16 subnormal
// A elements are multiplied exactly by mma.sync.
//
// Build-time parameters:
//   FP4_MMA_PTX   1: inline PTX (NVIDIA, compute capability >= 8.0); 0: a portable emulation in
//                 OpenCL C (any device: tests on PoCL), a chunk's four MMAs at a time, each lane
//                 reading the fragments of the lanes it needs itself (fp4_mma_chunk_emulated)
//   FP4_MMA_NVFP4 E4M3 block scales of 16 (else MXFP4: E8M0 of 32)
#ifndef FP4CL_COMMON_FP4_MMA_CL
#define FP4CL_COMMON_FP4_MMA_CL

// The BF16 pair of fragment register a_i from a word of the MMA layout (i a constant). Each half
// of the word (the low one: the pairs' first elements) holds the magnitude bits of a_3, a_1, a_0,
// a_2 at bits 0..2, 3..5, 6..8, 9..11 and the sign bits of a_1, a_3, a_2, a_0 at bits 12..15
// (host/prepare/fp4_mma_layout.hpp), so a_0 is one mask, a_1 a shift and a mask, a_2 and a_3 two
// shifts and masks each: 11 instructions a word, not 15 as for codes stored nibble by nibble.
inline uint fp4_mma_pair(uint word, int i) {
  switch (i) {
    case 0: return word & 0x81C081C0u;
    case 1: return (word << 3) & 0x81C081C0u;
    case 2: return ((word >> 3) & 0x01C001C0u) | ((word << 1) & 0x80008000u);
    default: return ((word << 6) & 0x01C001C0u) | ((word << 2) & 0x80008000u);
  }
}

// Byte `byte` (0..3) of v in bits 0..7 and 16..23 of the result, zeros elsewhere (one `prmt`).
inline uint fp4_mma_byte_pair(uint v, int byte) {
#if FP4_MMA_PTX
  uint d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(v), "r"(0u), "r"((uint)byte * 0x101u + 0x4040u));
  return d;
#else
  return ((v >> (8 * byte)) & 0xFFu) * 0x10001u;
#endif
}

// A block scale as a BF16 pair (the same scale in both halves), times 2^scale_exp, from the
// layout's scale byte in bits 0..7 and 16..23 of x (fp4_mma_byte_pair): one multiply-add. NVFP4:
// the layout's code (e + 9) << 3 | mmm of |s| = 1.mmm × 2^e (host/prepare/fp4_mma_layout.hpp,
// mma_nvfp4_scale_code) times 16 puts e + 9 at the BF16 exponent and mmm at the top of its
// mantissa, and the exponent bias adds scale_exp + 127 − 9; MXFP4: the E8M0 byte plus scale_exp
// is the BF16 exponent. Neither carries into the upper half (the host keeps the exponents in
// 1..254).
inline uint fp4_mma_scale_pair(uint x, int scale_exp) {
#ifdef FP4_MMA_NVFP4
  return x * 16u + (uint)(scale_exp + 118) * 0x00800080u;
#else
  return x * 128u + (uint)scale_exp * 0x00800080u;
#endif
}

#if FP4_MMA_PTX
// a × s per BF16 half, exact (see above); the addend -0 keeps the product's sign of zero.
inline uint fp4_mma_scaled(uint a, uint s) {
  uint d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(s), "r"(0x80008000u));
  return d;
}
// c += A · B for one warp (every lane calls it).
#define FP4_MMA(c, a, b0, b1)                                                                                         \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "         \
               "{%0,%1,%2,%3};"                                                                                      \
               : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                                              \
               : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
#else
inline float fp4_mma_bf16(uint bits) { return as_float(bits << 16); }
inline uint fp4_mma_scaled(uint a, uint s) {
  const uint lo = as_uint(fp4_mma_bf16(a & 0xFFFFu) * fp4_mma_bf16(s & 0xFFFFu)) >> 16;
  const uint hi = as_uint(fp4_mma_bf16(a >> 16) * fp4_mma_bf16(s >> 16)) >> 16;
  return lo | (hi << 16);
}
// The four MMAs of a chunk (MMA j = 0..3: k 16j .. 16j + 15) emulated for lane 4g + t of a warp
// (the fragments above). The lane is given the A fragments of its quad (lanes 4g .. 4g + 3: rows g
// and g + 8) and the B fragments of the lanes of its two columns (2t + h: lanes 4(2t + h) ..
// 4(2t + h) + 3), each made as that lane makes its own, and computes its four C elements of every
// A operand m < amats and B operand n < nt as fp32 FMA chains over j = 0..3, then k = 0..15: the
// MMAs' order, one after the other. No lane waits for another: no barrier (until 2026-12-02 the
// lanes exchanged their fragments through local memory, two barriers an MMA, and PoCL, which
// splits a kernel at every barrier inside a loop, spent over half of its compile time of the mma
// kernels on them: a test's programs 19.0 s against 9.2 now). Each of the lane's two rows and two
// columns of a chunk is unpacked to fp32 once (a, b), then the four chains run over them.
//   aq[((tq · 4 + j) · amats + m) · 4 + i]: A register i of MMA j, operand m, of lane 4g + tq
//   bq[((h · 4 + tq) · nt + n) · 8 + 2j + i]: B register i of MMA j, operand n, of lane 4(2t + h) + tq
//   c[(m · nt + n) · 4 + r] (register r: row g + 8 · (r / 2), column 2t + r % 2)
inline void fp4_mma_chunk_emulated(float* c, const uint* aq, const uint* bq, int amats, int nt) {
  // Element 16j + k (MMA j, its k) of the lane's two rows (a) and of its two columns (b) as fp32,
  // each unpacked once: register 2 · (k / 8) + h of lane tq = (k % 8) / 2, half k % 2.
  float a[2][64], b[2][64];
  for (int m = 0; m < amats; ++m) {
    for (int i = 0; i < 64; ++i) {
      const int j = i / 16, k = i % 16, tq = (k % 8) / 2;
      for (int h = 0; h < 2; ++h)
        a[h][i] = fp4_mma_bf16((aq[((tq * 4 + j) * amats + m) * 4 + h + 2 * (k / 8)] >> (16 * (k % 2))) & 0xFFFFu);
    }
    for (int n = 0; n < nt; ++n) {
      for (int i = 0; i < 64; ++i) {
        const int j = i / 16, k = i % 16, tq = (k % 8) / 2;
        for (int h = 0; h < 2; ++h)
          b[h][i] = fp4_mma_bf16((bq[((h * 4 + tq) * nt + n) * 8 + 2 * j + k / 8] >> (16 * (k % 2))) & 0xFFFFu);
      }
      for (int r = 0; r < 4; ++r) {
        float acc = c[(m * nt + n) * 4 + r];
        for (int i = 0; i < 64; ++i) acc = fma(a[r / 2][i], b[r % 2][i], acc);
        c[(m * nt + n) * 4 + r] = acc;
      }
    }
  }
}
#endif

// Fragments of the MMA layout (host/prepare/fp4_mma_layout.hpp), shared by the MMA kernels
// (moe_mma.cl, linear_mma.cl). A lane's B fragments of a chunk are its token's 8 BF16 pairs
// 8t .. 8t + 7 of the chunk, in order: b[2j] and b[2j + 1] feed MMA j. Its block scales of one
// chunk of 64 elements of k (group g's, shared by the 4 lanes of g):
#ifdef FP4_MMA_NVFP4
typedef uint2 mma_scales_t;  // 4 blocks of 16 of row g (x) and of row g + 8 (y)
#else
typedef uint mma_scales_t;   // 2 blocks of 32 of row g (bytes 0, 1) and of row g + 8 (bytes 2, 3)
#endif

// The BF16 scale pairs of lane 4g + t's elements of a chunk, all in one block (the layout puts
// the chunk's elements 16t .. 16t + 15 in lane t): NVFP4 block t, MXFP4 block t / 2, of row g (lo)
// and of row g + 8 (hi).
inline void mma_lane_scales(mma_scales_t sb, int t, int scale_exp, uint* lo, uint* hi) {
#ifdef FP4_MMA_NVFP4
  *lo = fp4_mma_scale_pair(fp4_mma_byte_pair(sb.x, t), scale_exp);
  *hi = fp4_mma_scale_pair(fp4_mma_byte_pair(sb.y, t), scale_exp);
#else
  *lo = fp4_mma_scale_pair(fp4_mma_byte_pair(sb, t / 2), scale_exp);
  *hi = fp4_mma_scale_pair(fp4_mma_byte_pair(sb, 2 + t / 2), scale_exp);
#endif
}

// The scaled A fragment of MMA j of a lane's chunk from word j (mma_word) and the lane's scales.
inline void mma_fragment(uint word, uint lo, uint hi, uint* a) {
  a[0] = fp4_mma_scaled(fp4_mma_pair(word, 0), lo);
  a[1] = fp4_mma_scaled(fp4_mma_pair(word, 1), hi);
  a[2] = fp4_mma_scaled(fp4_mma_pair(word, 2), lo);
  a[3] = fp4_mma_scaled(fp4_mma_pair(word, 3), hi);
}

// A lane's B fragments of a chunk, b[0..7] = a token's BF16 pairs p0 .. p0 + 7 (element 2p in the
// low half, 2p + 1 in the high; p0 a multiple of 8: two 16-byte loads) of a BF16 row in global or
// local memory (a pair is a register as it is).
#define MMA_B8_BF16(name, space)                                                                     \
  inline void name(space const uint* row, int p0, uint* b) {                                        \
    const space uint4* v = (const space uint4*)(row + p0);                                          \
    const uint4 u0 = v[0], u1 = v[1];                                                               \
    b[0] = u0.x, b[1] = u0.y, b[2] = u0.z, b[3] = u0.w, b[4] = u1.x, b[5] = u1.y, b[6] = u1.z, b[7] = u1.w; \
  }
MMA_B8_BF16(mma_b8_bf16, __global)
MMA_B8_BF16(mma_b8_bf16_local, __local)

// Word j (MMA j of the chunk) of a lane's uint4 of codes.
inline uint mma_word(uint4 w, int j) { return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w; }

#if !FP4_MMA_PTX
// For the emulation (fp4_mma_chunk_emulated): the A fragments of MMA j = 0..3 of every lane
// 4g + tq of a quad (tq = 0..3) for A operand m of amats, aq[((tq · 4 + j) · amats + m) · 4 + i],
// each made as that lane makes its own: from `word`, the calling lane's (4g + t) word of codes of
// the chunk (its quad's lie beside it), and the group's block scales sb.
inline void mma_quad_fragments(__global const uint4* word, mma_scales_t sb, int t, int scale_exp, int m, int amats,
                               uint* aq) {
  for (int tq = 0; tq < 4; ++tq) {
    uint lo, hi;
    mma_lane_scales(sb, tq, scale_exp, &lo, &hi);
    const uint4 w = word[tq - t];
    for (int j = 0; j < 4; ++j) mma_fragment(mma_word(w, j), lo, hi, aq + ((tq * 4 + j) * amats + m) * 4);
  }
}
#endif

// Element (row rr of 16, column col of 8) of a C fragment: its lane · 4 + register.
inline int mma_c_index(int rr, int col) { return (4 * (rr % 8) + col / 2) * 4 + 2 * (rr / 8) + col % 2; }

#endif  // FP4CL_COMMON_FP4_MMA_CL
