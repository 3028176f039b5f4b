// BF16 activations on an integer grid per chunk, for the integer dot products of W4A16 on CPUs
// (linear_gemv_int.cl with INT_PLANES 2: chunks of 16; moe_fp4_vec.cl's MOE_INT_PLANES: chunks of
// 16 for FC1's inputs, 8 for FC2's). A chunk's elements become integers q = x · 2^(14 - E), 2^E
// the smallest power of two above its largest magnitude (E = its BF16 exponent field, at least 1,
// - 126; so |q| < 2^14): exact for elements within 2^7 of the largest (the BF16 significand's 8
// bits fit), rounded to nearest, ties to even, below that (|error| <= 2^(E - 15)). They are stored
// as two int8 planes, q = 128 · hi + lo (hi -128..127, lo 0..127), for vpmaddubsw, whose other
// operand is 2·e2m1 + 12: the chunk's value is (Σ (2·e2m1 + 12) · q - 12 · Σq) · 2^(E - 15).
// The reference models the same grid in doubles (reference::w4a16_int_grid).
#ifndef FP4CL_INT_GRID_CL
#define FP4CL_INT_GRID_CL

// The chunk of N BF16 values (bits b): q into *q, E - 13 into *e13; returns Σq. A chunk holding NaN
// or an infinity gets q = 0 and *finite = 0.
#define INT_GRID_CHUNK(N)                                                                               \
  inline int int_grid_chunk##N(ushort##N b, int##N* q, int* e13, int* finite) {                        \
    const int##N mag = convert_int##N(b & (ushort)0x7FFF);                                             \
    int largest = 0;                                                                                   \
    for (int i = 0; i < N; ++i) largest = max(largest, ((int*)&mag)[i]);                               \
    *finite = largest < 0x7F80;                                                                        \
    const int emax = max(largest >> 7, 1);                                                             \
    *e13 = emax - 139;                                                                                 \
    /* The significand (8 bits; 7 for denormals) shifted to the chunk's grid: left by 6 - d for d = */ \
    /* emax - e <= 6, else right by d - 6 with rounding to nearest even (0 from a shift of 9 on). */   \
    const int##N e = max(mag >> 7, (int##N)(1));                                                       \
    const int##N sig = (mag & 0x7F) | select((int##N)(0), (int##N)(0x80), (mag >> 7) > 0);             \
    const int##N d = emax - e;                                                                         \
    const int##N r = clamp(d - 6, 0, 9);                                                               \
    const int##N down = (sig + (((int##N)(1) << r) >> 1) - 1 + ((sig >> r) & 1)) >> r;                \
    const int##N mq = select(down, sig << max(6 - d, 0), d <= 6);                                      \
    *q = *finite ? select(mq, -mq, convert_int##N(b >> (ushort)15) != 0) : (int##N)(0);               \
    int sum = 0;                                                                                       \
    for (int i = 0; i < N; ++i) sum += ((int*)q)[i];                                                   \
    return sum;                                                                                        \
  }
INT_GRID_CHUNK(8)
INT_GRID_CHUNK(16)
#undef INT_GRID_CHUNK

#endif  // FP4CL_INT_GRID_CL
