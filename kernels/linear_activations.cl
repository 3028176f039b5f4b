// The activation pre-pass of the FP4 linear kernels: BF16 activations x [M, K] (row-major) to the
// "split" fp32 rows the GEMV and GEMM kernels read (common/fp4_dot.cl): per token a row of KPAD
// floats, its KPAD/2 even elements first, then its KPAD/2 odd elements, zeros past K.
//
//   linear_split_bf16     W4A16: the BF16 values.
//   linear_quantize_fp4   W4A4: each block quantized with the contract recipe (FP4.md §3 NVFP4
//                         with the quant-direction global scale `gs`, §4 MXFP4), written as its
//                         exact FP4 value times its block scale, e2m1(code) × scale. The global
//                         scale's inverse belongs to the GEMV/GEMM epilogue (alpha).
//
// Quantizing once per call here, instead of inside every work-group of the matmul, costs one pass
// over M × K activations and lets W4A4 and W4A16 share the matmul kernels. Measured on PoCL
// (fp4cl-bench linear, NVFP4 W4A4 4096×4096): about 23 µs of a 2.7 ms call at m = 1 (0.8 %), 18 ms
// of 0.65 s at m = 512 (3 %); quantizing inside the GEMV would repeat the recipe (some 30
// operations per element, against about one per weight for the decode) for each of the N rows.
// NVFP4 needs IEEE division: build with the options of linear_build_options.
//
//   linear_quantize_fp4_bf16
//                         W4A4 for gemv_words' BF16 dot products and the MMA kernel: the same values
//                         as linear_quantize_fp4 (e2m1 × block scale: 6 significant bits at most,
//                         exact in BF16), written as BF16 rows [M, K] in element order, the
//                         layout of a W4A16 layer's input; with moe_quant.cl's block function, the
//                         one linear_mma.cl's in-kernel quantization (MMA_X_QUANT) calls. Its own
//                         geometry: one FP4 block a work-item, global (K / block, M). (A step of 64
//                         elements a work-item left a 4096-element token to one work-group of 64
//                         work-items: 21 µs of GPU time for 8 tokens on an H200, 3 times the
//                         matmul's.)
//   linear_block_scale_bf16, linear_block_scale_fp4
//                         For gemv_denorm (linear_gemv_denorm.cl), W4A16 (the BF16 values) and W4A4
//                         (linear_quantize_fp4's values, e2m1 × scale): per token KPAD floats in
//                         element order (zeros past K), each 16-element chunk scaled by 2^(126 - E),
//                         E the exponent of its largest magnitude (the BF16 exponent field - 127,
//                         clamped to -126..127: a subnormal chunk counts as -126, one holding NaN or
//                         infinity as 127), so that its largest magnitude lies in [2^126, 2^127);
//                         after the rows of max_tokens tokens, per token KPAD/16 floats 2^E (1 past
//                         K). The scaling is exact (a power of two; ldexp) but for elements that
//                         fall below 2^-126 after it, i.e. more than 2^252 below their chunk's largest.
//   linear_quantize_fp4_codes
//                         W4A4 for the integer GEMV (linear_gemv_int.cl): the same quantization,
//                         written as integers 2·e2m1(code) (int8, per token a row of KPAD in
//                         element order, zeros past K); after the rows of max_tokens tokens, per
//                         token KPAD/16 ints: each 16-element chunk's offset -12 · Σ codes (the
//                         GEMV's weight codes are 2·e2m1 + 12, as for the planes below); and from
//                         byte offset 2 · max_tokens · KPAD, per token KPAD/16 floats: the block
//                         scale of each chunk (an MXFP4 block's for both of its chunks; 0 past K).
//   linear_bf16_int_planes
//                         W4A16 for the integer GEMV (linear_gemv_int.cl, INT_PLANES 2): each
//                         16-element chunk of BF16 values as integers q on the grid 2^(E - 14),
//                         E = (its largest magnitude's BF16 exponent field, at least 1) - 126, so
//                         that |q| < 2^14: q = x · 2^(14 - E) exactly for elements within 2^7 of
//                         the chunk's largest (the BF16 significand's 8 bits fit), rounded to
//                         nearest-even below that (|error| <= 2^(E - 15)). Written as two int8
//                         planes, q = 128 · hi + lo (hi -128..127, lo 0..127): per token a row of
//                         KPAD hi bytes at 0, lo bytes from 3 · max_tokens · KPAD; per token KPAD/16
//                         ints from max_tokens · KPAD: each chunk's offset -12 · Σq (the GEMV's
//                         weight codes are 2·e2m1 + 12); and from 2 · max_tokens · KPAD per token
//                         KPAD/16 float2 factors (a, b), a · b = 2^(E - 13), both normal (a =
//                         2^max(E - 13, -126)), so that the GEMV's block sum of 2·e2m1(w) · q times
//                         weight scale / 4 times a · b is the chunk's Σ w·x. A chunk holding NaN or
//                         an infinity has q = 0 and a = NaN: its token's outputs are NaN. Past K,
//                         zero chunks (q = 0: their factors multiply zeros).
//
// Build options: FP4CL_FORMAT_MXFP4 (1 MXFP4, 0 NVFP4), and FP4CL_DIV_VIA_FP64 or
// -cl-fp32-correctly-rounded-divide-sqrt for NVFP4 W4A4.
// Launch: global (KPAD / 64, M), any local size. One work-item writes one 64-element step;
// linear_quantize_fp4 one FP4 block (global (KPAD / block, M)), linear_quantize_fp4_bf16 one block
// (global (K / block, M)).
#include "common/bf16.cl"
#include "common/fp4_dot.cl"
#include "common/int_grid.cl"
#if !FP4CL_FORMAT_MXFP4
#define MOE_NVFP4  // moe_quant.cl's NVFP4 recipe
#endif
#include "moe_quant.cl"

#if FP4CL_FORMAT_MXFP4
#define FP4CL_ACT_BLOCK 32
#else
#define FP4CL_ACT_BLOCK 16
#endif

// Writes the step's 64 values v (zeros past K already in place), split even/odd.
inline void act_store_step(const float* v, __global float* restrict out, uint m, uint s, uint kpad) {
  __global float* even = out + (size_t)m * kpad + s * (FP4CL_STEP / 2);
  __global float* odd = even + kpad / 2u;
  for (uint i = 0; i < FP4CL_STEP / 2; ++i) {
    even[i] = v[2 * i];
    odd[i] = v[2 * i + 1];
  }
}

// The recipe's scale of a block whose largest magnitude is amax (NVFP4: under the global scale
// gs): the multiplier its elements are encoded with (.x) and the decoded block scale (.y).
inline float2 act_block_scale(float amax, float gs) {
#if FP4CL_FORMAT_MXFP4
  (void)gs;
  const uint sf = mxfp4_scale_byte(amax);
  return (float2)(mxfp4_multiplier(sf), e8m0_decode(sf));
#else
  const uint sf = nvfp4_scale_byte(amax, gs);
  return (float2)(nvfp4_multiplier(sf, gs), e4m3_decode(sf));
#endif
}

// One FP4 block of BF16 inputs as fp32 (v[0 .. FP4CL_ACT_BLOCK - 1]); returns its amax.
inline float act_load_block(const __global ushort* src, float* v) {
  float amax = 0.0f;
  for (uint i = 0; i < FP4CL_ACT_BLOCK; ++i) {
    v[i] = bf16_to_float(src[i]);
    amax = fp4cl_amax_step(amax, v[i]);
  }
  return amax;
}

__kernel void linear_split_bf16(const __global ushort* restrict x, __global float* restrict out, uint m_tokens,
                                uint k, uint kpad) {
  const uint s = get_global_id(0), m = get_global_id(1);
  if (s >= kpad / FP4CL_STEP || m >= m_tokens) return;
  const __global ushort* src = x + (size_t)m * k + s * FP4CL_STEP;
  float v[FP4CL_STEP];
  // K is a multiple of 16: a step holds 0..4 valid groups of 16 elements.
  for (uint c = 0; c < FP4CL_STEP / 16; ++c) {
    float16 g = (float16)(0.0f);
    if (s * FP4CL_STEP + (c + 1u) * 16u <= k) g = bf16x16(src, c);
    vstore16(g, c, v);
  }
  act_store_step(v, out, m, s, kpad);
}

// Block b of a token's row (row: its first element) quantized with moe_quant.cl's block function
// (the recipe every W4A4 route uses), as e2m1 × block scale into q; zeros for a block past K (K is
// a multiple of the block). linear_quantize_fp4 and act_quantize_step.
inline void act_quantize_block(const __global ushort* row, uint b, uint k, float gs, float16* q) {
  if ((b + 1u) * MOE_QUANT_BLOCK <= k) {
    moe_quantize_bf16_block(row + b * MOE_QUANT_BLOCK, gs, q);
  } else {
    for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) q[i] = (float16)(0.0f);
  }
}

// Step s of a token's row (row: its first element) quantized block by block (act_quantize_block)
// into v[0 .. FP4CL_STEP - 1], zeros past K (linear_block_scale_fp4).
inline void act_quantize_step(const __global ushort* row, uint s, uint k, float gs, float* v) {
  for (uint b = 0; b < FP4CL_STEP / MOE_QUANT_BLOCK; ++b) {
    float16 q[MOE_QUANT_BLOCK / 16];
    act_quantize_block(row, s * (FP4CL_STEP / MOE_QUANT_BLOCK) + b, k, gs, q);
    for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) vstore16(q[i], b * (MOE_QUANT_BLOCK / 16) + i, v);
  }
}

// One 16-element chunk v scaled by 2^(126 - E) into dst, and 2^E into *factor
// (linear_block_scale_bf16 / _fp4 above).
inline void act_store_chunk_scaled(float16 v, __global float* dst, __global float* factor) {
  const uint16 e = (as_uint16(v) >> 23) & 0xFFu;
  const uint8 e8 = max(e.lo, e.hi);
  const uint4 e4 = max(e8.lo, e8.hi);
  const uint2 e2 = max(e4.lo, e4.hi);
  const int exponent = clamp((int)max(e2.x, e2.y) - 127, -126, 127);
  vstore16(ldexp(v, 126 - exponent), 0, dst);
  *factor = ldexp(1.0f, exponent);
}

__kernel void linear_block_scale_bf16(const __global ushort* restrict x, __global float* restrict out,
                                      uint m_tokens, uint k, uint kpad, uint max_tokens) {
  const uint s = get_global_id(0), m = get_global_id(1);
  if (s >= kpad / FP4CL_STEP || m >= m_tokens) return;
  const __global ushort* src = x + (size_t)m * k + s * FP4CL_STEP;
  __global float* dst = out + (size_t)m * kpad + s * FP4CL_STEP;
  __global float* factor = out + (size_t)max_tokens * kpad + (size_t)m * (kpad / 16u) + s * (FP4CL_STEP / 16);
  // K is a multiple of 16: a step holds 0..4 valid chunks of 16 elements (zeros, factor 1, past K).
  for (uint c = 0; c < FP4CL_STEP / 16; ++c) {
    float16 v = (float16)(0.0f);
    if (s * FP4CL_STEP + (c + 1u) * 16u <= k) v = bf16x16(src, c);
    act_store_chunk_scaled(v, dst + 16u * c, factor + c);
  }
}

// The same for W4A4: each block quantized first (linear_quantize_fp4's values, e2m1 × scale).
__kernel void linear_block_scale_fp4(const __global ushort* restrict x, __global float* restrict out,
                                     uint m_tokens, uint k, uint kpad, float gs, uint max_tokens) {
  const uint s = get_global_id(0), m = get_global_id(1);
  if (s >= kpad / FP4CL_STEP || m >= m_tokens) return;
  __global float* dst = out + (size_t)m * kpad + s * FP4CL_STEP;
  __global float* factor = out + (size_t)max_tokens * kpad + (size_t)m * (kpad / 16u) + s * (FP4CL_STEP / 16);
  float v[FP4CL_STEP];
  act_quantize_step(x + (size_t)m * k, s, k, gs, v);
  for (uint c = 0; c < FP4CL_STEP / 16; ++c) act_store_chunk_scaled(vload16(c, v), dst + 16u * c, factor + c);
}

// One FP4 block a work-item (global (KPAD / block, M)): a step of 64 a work-item left a 4096-element
// token to one work-group of 64 work-items (on an H200, 26 µs of GPU time for 8 tokens before
// gemv_split's 91). Its even elements at kpad-row index e / 2, its odd ones kpad / 2 further.
__kernel void linear_quantize_fp4(const __global ushort* restrict x, __global float* restrict out, uint m_tokens,
                                  uint k, uint kpad, float gs) {
  const uint b = get_global_id(0), m = get_global_id(1);
  if (b >= kpad / MOE_QUANT_BLOCK || m >= m_tokens) return;
  __global float* even = out + (size_t)m * kpad + b * (MOE_QUANT_BLOCK / 2);
  __global float* odd = even + kpad / 2u;
  float16 q[MOE_QUANT_BLOCK / 16];
  act_quantize_block(x + (size_t)m * k, b, k, gs, q);
  for (int i = 0; i < MOE_QUANT_BLOCK / 16; ++i) {
    vstore8(q[i].even, i, even);
    vstore8(q[i].odd, i, odd);
  }
}

__kernel void linear_quantize_fp4_bf16(const __global ushort* restrict x, __global ushort* restrict out,
                                       uint m_tokens, uint k, uint kpad, float gs) {
  (void)kpad;
  const uint b = get_global_id(0), m = get_global_id(1);
  if (b >= k / MOE_QUANT_BLOCK || m >= m_tokens) return;
  const size_t at = (size_t)m * k + b * MOE_QUANT_BLOCK;  // even: the BF16 pairs are 4-byte aligned
  moe_quantize_bf16_pairs(x + at, gs, (__global uint*)(out + at));
}

// 2·e2m1 of an E2M1 code: an integer in -12..12 (code 8 is -0).
inline char act_twice_e2m1(uint code) {
  const char m[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (code & 8u) ? (char)(-m[code & 7u]) : m[code & 7u];
}

__kernel void linear_quantize_fp4_codes(const __global ushort* restrict x, __global uchar* restrict out,
                                        uint m_tokens, uint k, uint kpad, float gs, uint max_tokens) {
  const uint s = get_global_id(0), m = get_global_id(1);
  if (s >= kpad / FP4CL_STEP || m >= m_tokens) return;
  const __global ushort* src = x + (size_t)m * k + s * FP4CL_STEP;
  __global char* codes = (__global char*)out + (size_t)m * kpad + s * FP4CL_STEP;
  __global int* offsets = (__global int*)(out + (size_t)max_tokens * kpad) + (size_t)m * (kpad / 16u) +
                          s * (FP4CL_STEP / 16);
  __global float* scales = (__global float*)(out + (size_t)max_tokens * kpad * 2u) + (size_t)m * (kpad / 16u) +
                           s * (FP4CL_STEP / 16);
  for (uint b = 0; b < FP4CL_STEP / FP4CL_ACT_BLOCK; ++b) {
    const uint first = b * FP4CL_ACT_BLOCK;
    if (s * FP4CL_STEP + first + FP4CL_ACT_BLOCK > k) {  // a block past K (K is a multiple of the block)
      for (uint i = 0; i < FP4CL_ACT_BLOCK; ++i) codes[first + i] = 0;
      for (uint c = 0; c < FP4CL_ACT_BLOCK / 16; ++c) {
        offsets[first / 16 + c] = 0;
        scales[first / 16 + c] = 0.0f;
      }
      continue;
    }
    float v[FP4CL_ACT_BLOCK];
    const float2 block_scale = act_block_scale(act_load_block(src + first, v), gs);
    const float mult = block_scale.x, scale = block_scale.y;
    for (uint c = 0; c < FP4CL_ACT_BLOCK / 16; ++c) {
      int sum = 0;
      for (uint i = first + 16 * c; i < first + 16 * (c + 1); ++i) {
        const char code = act_twice_e2m1(fp4_encode_scaled(v[i - first], mult));
        codes[i] = code;
        sum += code;
      }
      offsets[first / 16 + c] = -12 * sum;
      scales[first / 16 + c] = scale;
    }
  }
}

// One 16-element chunk of BF16 values (bits b) on its integer grid (common/int_grid.cl): the planes
// into hi[0..15] and lo[0..15], the offset -12 · Σq into *offset, the factors into *factor.
inline void act_store_chunk_planes(ushort16 b, __global char* hi, __global char* lo, __global int* offset,
                                   __global float2* factor) {
  int16 q;
  int e13, finite;
  *offset = -12 * int_grid_chunk16(b, &q, &e13, &finite);
  const int a = max(e13, -126);
  *factor = finite ? (float2)(ldexp(1.0f, a), ldexp(1.0f, e13 - a)) : (float2)(NAN, 1.0f);
  vstore16(convert_char16(q >> 7), 0, hi);
  vstore16(convert_char16(q & 0x7F), 0, lo);
}

__kernel void linear_bf16_int_planes(const __global ushort* restrict x, __global uchar* restrict out, uint m_tokens,
                                     uint k, uint kpad, uint max_tokens) {
  const uint s = get_global_id(0), m = get_global_id(1);
  if (s >= kpad / FP4CL_STEP || m >= m_tokens) return;
  const size_t row = (size_t)m * kpad + s * FP4CL_STEP, chunk = (size_t)m * (kpad / 16u) + s * (FP4CL_STEP / 16);
  const size_t plane = (size_t)max_tokens * kpad;
  __global char* hi = (__global char*)out + row;
  __global char* lo = (__global char*)out + 3u * plane + row;
  __global int* offsets = (__global int*)(out + plane) + chunk;
  __global float2* factors = (__global float2*)(out + 2u * plane) + chunk;
  const __global ushort* src = x + (size_t)m * k + s * FP4CL_STEP;
  // K is a multiple of 16: a step holds 0..4 valid chunks of 16 elements (zeros past K).
  for (uint c = 0; c < FP4CL_STEP / 16; ++c) {
    ushort16 b = (ushort16)(0);
    if (s * FP4CL_STEP + (c + 1u) * 16u <= k) b = vload16(c, src);
    act_store_chunk_planes(b, hi + 16u * c, lo + 16u * c, offsets + c, factors + c);
  }
}
