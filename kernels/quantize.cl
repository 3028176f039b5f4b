// Quantization of BF16 rows [rows, cols] to NVFP4 (block 16) and MXFP4 (block 32), and
// dequantization back to BF16 or FP32 (FP4.md §3, §4, §7). Host launcher: host/ops/quantize.cpp.
//
// Data: BF16 elements as ushort, row-major [rows, cols]; packed E2M1 codes [rows, cols/2] with
// element 2i in the low nibble; one scale byte per block (E4M3 for NVFP4, E8M0 for MXFP4) in the
// linear layout [rows, cols/block] (kernels *_linear) or the 128×4 swizzled layout (*_swizzled).
//
// Work: dimension 1 is the row; along dimension 0 each work-item takes `blocks_per_item`
// consecutive blocks of its row (a multiple of 8). Quantization runs 8 blocks at a time with the
// recipe vectorized across them (fp4_vector.cl); the blocks at a row's end that do not fill a
// group of 8 go one at a time through the scalar recipe (quant_recipe.cl). The host may round the
// global size up to a multiple of the local size: extra work-items find nothing to do.
//
// Swizzled padding: the *_swizzled quantize kernels zero it. They run over the padded grid,
// roundup(rows, 128) × roundup(cols/block, 4) blocks, and write 0 to every scale byte outside the
// matrix, so the whole swizzled scale buffer is defined after one launch and nobody clears it.
//
// The NVFP4 recipe needs IEEE fp32 division: build with -cl-fp32-correctly-rounded-divide-sqrt or
// -D FP4CL_DIV_VIA_FP64 (the host's add_exact_division in host/cl/exact_division.hpp decides).
#include "common/quant_recipe.cl"
#include "common/fp4_vector.cl"

// Offset of scale (row, col) of a [rows, scale_cols] matrix.
inline size_t scale_offset(uint row, uint col, uint scale_cols, bool swizzled) {
  return swizzled ? (size_t)swizzled_scale_offset(row, col, (scale_cols + 3u) & ~3u)
                  : (size_t)row * scale_cols + col;
}

// Stores the scales of blocks col .. col+7 (col a multiple of 8: in the swizzled layout two runs
// of 4 consecutive bytes).
inline void store_8_scales(__global uchar* scales, uint row, uint col, uint scale_cols, bool swizzled, uint8 bytes) {
  const uchar8 b = convert_uchar8(bytes);
  if (swizzled) {
    vstore4(b.lo, 0, scales + scale_offset(row, col, scale_cols, true));
    vstore4(b.hi, 0, scales + scale_offset(row, col + 4u, scale_cols, true));
  } else {
    vstore8(b, 0, scales + scale_offset(row, col, scale_cols, false));
  }
}

// ---- NVFP4: `first` is the index of the block's first element.

inline void nvfp4_quantize_8_blocks(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                    uint row, uint col, uint cols, float gs, bool swizzled) {
  const size_t first = (size_t)row * cols + (size_t)col * 16u;
  __global const ushort* in = x + first;
  const ushort8 amax = max_of_8x16(
      bf16_magnitudes16(vload16(0, in)), bf16_magnitudes16(vload16(1, in)), bf16_magnitudes16(vload16(2, in)),
      bf16_magnitudes16(vload16(3, in)), bf16_magnitudes16(vload16(4, in)), bf16_magnitudes16(vload16(5, in)),
      bf16_magnitudes16(vload16(6, in)), bf16_magnitudes16(vload16(7, in)));
  const uint8 sf = nvfp4_scale_bytes8(bf16_magnitudes_to_float8(amax), gs);
  float mult[8];
  vstore8(nvfp4_multipliers8(sf, gs), 0, mult);
  __global const uint* pairs = (__global const uint*)in;
  __global uint* out = (__global uint*)(packed + first / 2);
  for (int j = 0; j < 8; ++j) vstore2(e2m1_encode_pairs8(vload8(j, pairs), mult[j]), j, out);
  store_8_scales(scales, row, col, cols / 16u, swizzled, sf);
}

inline void nvfp4_quantize_block(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                 uint row, uint col, uint cols, float gs, bool swizzled) {
  const size_t first = (size_t)row * cols + (size_t)col * 16u;
  const float amax = bf16_to_float(max_of_16(bf16_magnitudes16(vload16(0, x + first))));
  const uint sf = nvfp4_scale_byte(amax, gs);
  const float mult = nvfp4_multiplier(sf, gs);
  vstore2(e2m1_encode_pairs8(vload8(0, (__global const uint*)(x + first)), mult), 0, (__global uint*)(packed + first / 2));
  scales[scale_offset(row, col, cols / 16u, swizzled)] = (uchar)sf;
}

// ---- MXFP4

inline ushort16 mxfp4_block_magnitudes(__global const ushort* in, int block) {
  const ushort16 a = bf16_magnitudes16(vload16(2 * block, in)), b = bf16_magnitudes16(vload16(2 * block + 1, in));
  return a > b ? a : b;
}

inline void mxfp4_quantize_8_blocks(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                    uint row, uint col, uint cols, float unused_gs, bool swizzled) {
  const size_t first = (size_t)row * cols + (size_t)col * 32u;
  __global const ushort* in = x + first;
  const ushort8 amax = max_of_8x16(mxfp4_block_magnitudes(in, 0), mxfp4_block_magnitudes(in, 1),
                                   mxfp4_block_magnitudes(in, 2), mxfp4_block_magnitudes(in, 3),
                                   mxfp4_block_magnitudes(in, 4), mxfp4_block_magnitudes(in, 5),
                                   mxfp4_block_magnitudes(in, 6), mxfp4_block_magnitudes(in, 7));
  const uint8 e = mxfp4_scale_bytes8(bf16_magnitudes_to_float8(amax));
  float mult[8];
  vstore8(mxfp4_multipliers8(e), 0, mult);
  __global const uint* pairs = (__global const uint*)in;
  __global uint* out = (__global uint*)(packed + first / 2);
  for (int j = 0; j < 16; ++j) vstore2(e2m1_encode_pairs8(vload8(j, pairs), mult[j / 2]), j, out);
  store_8_scales(scales, row, col, cols / 32u, swizzled, e);
}

inline void mxfp4_quantize_block(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                 uint row, uint col, uint cols, float unused_gs, bool swizzled) {
  const size_t first = (size_t)row * cols + (size_t)col * 32u;
  const float amax = bf16_to_float(max_of_16(mxfp4_block_magnitudes(x + first, 0)));
  const uint e = mxfp4_scale_byte(amax);
  const float mult = mxfp4_multiplier(e);
  __global const uint* pairs = (__global const uint*)(x + first);
  __global uint* out = (__global uint*)(packed + first / 2);
  vstore2(e2m1_encode_pairs8(vload8(0, pairs), mult), 0, out);
  vstore2(e2m1_encode_pairs8(vload8(1, pairs), mult), 1, out);
  scales[scale_offset(row, col, cols / 32u, swizzled)] = (uchar)e;
}

// The work-item's blocks of its row. In the swizzled layout the grid also covers the padding,
// whose scale bytes are zeroed here.
#define FP4CL_QUANTIZE_ITEMS(format, block)                                                                  \
  inline void format##_quantize_items(__global const ushort* x, __global uchar* packed, __global uchar* scales, \
                                      uint rows, uint cols, float gs, uint blocks_per_item, bool swizzled) {   \
    const uint row = get_global_id(1), scale_cols = cols / block;                                             \
    const uint grid_cols = swizzled ? (scale_cols + 3u) & ~3u : scale_cols;                                   \
    const uint grid_rows = swizzled ? (rows + 127u) & ~127u : rows;                                           \
    const uint first = get_global_id(0) * blocks_per_item;                                                    \
    if (row >= grid_rows || first >= grid_cols) return;                                                       \
    const uint end = min(first + blocks_per_item, grid_cols);                                                 \
    uint col = first;                                                                                         \
    if (row < rows)                                                                                           \
      for (; col + 8u <= min(end, scale_cols); col += 8u)                                                     \
        format##_quantize_8_blocks(x, packed, scales, row, col, cols, gs, swizzled);                          \
    for (; col < end; ++col) {                                                                                \
      if (row < rows && col < scale_cols)                                                                     \
        format##_quantize_block(x, packed, scales, row, col, cols, gs, swizzled);                             \
      else                                                                                                    \
        scales[scale_offset(row, col, scale_cols, true)] = 0;                                                 \
    }                                                                                                         \
  }
FP4CL_QUANTIZE_ITEMS(nvfp4, 16u)
FP4CL_QUANTIZE_ITEMS(mxfp4, 32u)

// ---- Dequantization: w = e2m1 × scale × gs_d, left to right (the first product is exact),
// written as FP32 or rounded to BF16 (nearest even). MXFP4 has no global scale (gs_d = 1).

// Stores 16 elements from their even and odd halves.
inline void store16_f32(__global float* out, size_t first, float8 even, float8 odd) {
  float16 w;
  w.even = even;
  w.odd = odd;
  vstore16(w, 0, out + first);
}
inline void store16_bf16(__global ushort* out, size_t first, float8 even, float8 odd) {
  vstore8(float_to_bf16x8(even) | (float_to_bf16x8(odd) << 16), 0, (__global uint*)(out + first));
}

#define FP4CL_DEQUANTIZE_16(out_name)                                                                 \
  {                                                                                                   \
    const uint8 bytes = convert_uint8(as_uchar8(vload2(0, (__global const uint*)(packed + first / 2)))); \
    store16_##out_name(out, first, e2m1_decode8(bytes & 15u) * scale * gs_d,                          \
                       e2m1_decode8(bytes >> 4) * scale * gs_d);                                      \
  }

#define FP4CL_DEQUANTIZE_KERNELS(layout, swizzled, out_name, out_type)                                          \
  __kernel void dequantize_nvfp4_##layout##_##out_name(__global const uchar* packed, __global const uchar* scales, \
                                                       __global out_type* out, uint rows, uint cols, float gs_d,  \
                                                       uint blocks_per_item) {                                    \
    const uint row = get_global_id(1), scale_cols = cols / 16u, col0 = get_global_id(0) * blocks_per_item;      \
    if (row >= rows) return;                                                                                    \
    for (uint col = col0; col < min(col0 + blocks_per_item, scale_cols); ++col) {                               \
      const size_t first = (size_t)row * cols + (size_t)col * 16u;                                              \
      const float scale = e4m3_decode(scales[scale_offset(row, col, scale_cols, swizzled)]);                    \
      FP4CL_DEQUANTIZE_16(out_name)                                                                             \
    }                                                                                                           \
  }                                                                                                             \
  __kernel void dequantize_mxfp4_##layout##_##out_name(__global const uchar* packed, __global const uchar* scales, \
                                                       __global out_type* out, uint rows, uint cols,              \
                                                       uint blocks_per_item) {                                    \
    const uint row = get_global_id(1), scale_cols = cols / 32u, col0 = get_global_id(0) * blocks_per_item;      \
    if (row >= rows) return;                                                                                    \
    const float gs_d = 1.0f;                                                                                    \
    for (uint col = col0; col < min(col0 + blocks_per_item, scale_cols); ++col) {                               \
      const float scale = e8m0_decode(scales[scale_offset(row, col, scale_cols, swizzled)]);                    \
      for (uint part = 0; part < 2u; ++part) {                                                                  \
        const size_t first = (size_t)row * cols + (size_t)col * 32u + part * 16u;                               \
        FP4CL_DEQUANTIZE_16(out_name)                                                                           \
      }                                                                                                         \
    }                                                                                                           \
  }

#define FP4CL_QUANTIZE_KERNELS(layout, swizzled)                                                             \
  __kernel void quantize_nvfp4_##layout(__global const ushort* x, __global uchar* packed,                      \
                                        __global uchar* scales, uint rows, uint cols, float gs,                \
                                        uint blocks_per_item) {                                                \
    nvfp4_quantize_items(x, packed, scales, rows, cols, gs, blocks_per_item, swizzled);                        \
  }                                                                                                            \
  __kernel void quantize_mxfp4_##layout(__global const ushort* x, __global uchar* packed,                      \
                                        __global uchar* scales, uint rows, uint cols, uint blocks_per_item) {  \
    mxfp4_quantize_items(x, packed, scales, rows, cols, 1.0f, blocks_per_item, swizzled);                      \
  }

FP4CL_QUANTIZE_KERNELS(linear, false)
FP4CL_QUANTIZE_KERNELS(swizzled, true)
FP4CL_DEQUANTIZE_KERNELS(linear, false, f32, float)
FP4CL_DEQUANTIZE_KERNELS(linear, false, bf16, ushort)
FP4CL_DEQUANTIZE_KERNELS(swizzled, true, f32, float)
FP4CL_DEQUANTIZE_KERNELS(swizzled, true, bf16, ushort)
