// Quantization of BF16 rows [rows, cols] to NVFP4 (block 16) and MXFP4 (block 32), and
// dequantization back to BF16 or FP32 (FP4.md §3, §4, §7). Host launcher: host/ops/quantize.cpp.
//
// Data: BF16 elements as ushort, row-major [rows, cols]; packed E2M1 codes [rows, cols/2] with
// element 2i in the low nibble; one scale byte per block (E4M3 for NVFP4, E8M0 for MXFP4) in the
// linear layout [rows, cols/block] (kernels *_linear) or the 128×4 swizzled layout (*_swizzled).
//
// Work: one work-item per block. Dimension 0 is the block column, dimension 1 the row; the host
// may round the global size up to a multiple of the local size (the extra work-items return).
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

// Whether this work-item's block (col, row) lies in the matrix. Work-items in the swizzled
// padding zero their scale byte; any other work-item outside the matrix does nothing.
inline bool block_in_matrix(uint col, uint row, uint scale_cols, uint rows, bool swizzled,
                            __global uchar* scales) {
  if (col < scale_cols && row < rows) return true;
  if (swizzled && col < ((scale_cols + 3u) & ~3u) && row < ((rows + 127u) & ~127u))
    scales[scale_offset(row, col, scale_cols, true)] = 0;
  return false;
}

inline void quantize_nvfp4_block(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                 uint rows, uint cols, float gs, bool swizzled) {
  const uint col = get_global_id(0), row = get_global_id(1), scale_cols = cols / 16u;
  if (!block_in_matrix(col, row, scale_cols, rows, swizzled, scales)) return;
  const size_t first = (size_t)row * cols + (size_t)col * 16u;
  const float16 v = bf16x16_to_float(vload16(0, x + first));
  const uint sf = nvfp4_scale_byte(amax16(v), gs);
  const float mult = nvfp4_multiplier(sf, gs);
  vstore8(pack_e2m1x16(e2m1_encode16(v * mult, v)), 0, packed + first / 2);
  scales[scale_offset(row, col, scale_cols, swizzled)] = (uchar)sf;
}

inline void quantize_mxfp4_block(__global const ushort* x, __global uchar* packed, __global uchar* scales,
                                 uint rows, uint cols, bool swizzled) {
  const uint col = get_global_id(0), row = get_global_id(1), scale_cols = cols / 32u;
  if (!block_in_matrix(col, row, scale_cols, rows, swizzled, scales)) return;
  const size_t first = (size_t)row * cols + (size_t)col * 32u;
  const float16 v0 = bf16x16_to_float(vload16(0, x + first));
  const float16 v1 = bf16x16_to_float(vload16(1, x + first));
  const uint e = mxfp4_scale_byte(fmax(amax16(v0), amax16(v1)));
  const float mult = mxfp4_multiplier(e);
  vstore8(pack_e2m1x16(e2m1_encode16(v0 * mult, v0)), 0, packed + first / 2);
  vstore8(pack_e2m1x16(e2m1_encode16(v1 * mult, v1)), 1, packed + first / 2);
  scales[scale_offset(row, col, scale_cols, swizzled)] = (uchar)e;
}

// Dequantization: w = e2m1 × scale × gs_d, left to right (the first product is exact), written
// as FP32 or rounded to BF16 (nearest even). MXFP4 has no global scale (gs_d = 1).
inline float16 dequantize_half_block(__global const uchar* packed, size_t first_byte, float scale, float gs_d) {
  return e2m1_decode16(unpack_e2m1x16(vload8(0, packed + first_byte))) * scale * gs_d;
}

inline void store16_f32(__global float* out, size_t first, float16 w) { vstore16(w, 0, out + first); }
inline void store16_bf16(__global ushort* out, size_t first, float16 w) {
  vstore16(float_to_bf16x16(w), 0, out + first);
}

#define FP4CL_QUANTIZE_KERNELS(layout, swizzled)                                                           \
  __kernel void quantize_nvfp4_##layout(__global const ushort* x, __global uchar* packed,                    \
                                        __global uchar* scales, uint rows, uint cols, float gs) {            \
    quantize_nvfp4_block(x, packed, scales, rows, cols, gs, swizzled);                                       \
  }                                                                                                          \
  __kernel void quantize_mxfp4_##layout(__global const ushort* x, __global uchar* packed,                    \
                                        __global uchar* scales, uint rows, uint cols) {                      \
    quantize_mxfp4_block(x, packed, scales, rows, cols, swizzled);                                           \
  }

#define FP4CL_DEQUANTIZE_KERNELS(layout, swizzled, out_name, out_type)                                       \
  __kernel void dequantize_nvfp4_##layout##_##out_name(__global const uchar* packed,                         \
                                                       __global const uchar* scales, __global out_type* out, \
                                                       uint rows, uint cols, float gs_d) {                   \
    const uint col = get_global_id(0), row = get_global_id(1), scale_cols = cols / 16u;                      \
    if (col >= scale_cols || row >= rows) return;                                                            \
    const size_t first = (size_t)row * cols + (size_t)col * 16u;                                             \
    const float scale = e4m3_decode(scales[scale_offset(row, col, scale_cols, swizzled)]);                   \
    store16_##out_name(out, first, dequantize_half_block(packed, first / 2, scale, gs_d));                   \
  }                                                                                                          \
  __kernel void dequantize_mxfp4_##layout##_##out_name(__global const uchar* packed,                         \
                                                       __global const uchar* scales, __global out_type* out, \
                                                       uint rows, uint cols) {                               \
    const uint col = get_global_id(0), row = get_global_id(1), scale_cols = cols / 32u;                      \
    if (col >= scale_cols || row >= rows) return;                                                            \
    const size_t first = (size_t)row * cols + (size_t)col * 32u;                                             \
    const float scale = e8m0_decode(scales[scale_offset(row, col, scale_cols, swizzled)]);                   \
    store16_##out_name(out, first, dequantize_half_block(packed, first / 2, scale, 1.0f));                   \
    store16_##out_name(out, first + 16u, dequantize_half_block(packed, first / 2 + 8u, scale, 1.0f));        \
  }

FP4CL_QUANTIZE_KERNELS(linear, false)
FP4CL_QUANTIZE_KERNELS(swizzled, true)
FP4CL_DEQUANTIZE_KERNELS(linear, false, f32, float)
FP4CL_DEQUANTIZE_KERNELS(linear, false, bf16, ushort)
FP4CL_DEQUANTIZE_KERNELS(swizzled, true, f32, float)
FP4CL_DEQUANTIZE_KERNELS(swizzled, true, bf16, ushort)
