// MoE FC1 + SwiGLU (+ W4A4: the FC2 input's block quantization), one tile of up to MOE_TILE_M
// pairs of one expert per work-group row, one intermediate index r per work-item: it streams
// gate row r and up row I + r of the expert once, against the tile's activations, and writes
// a = bf16(silu(g) × up) for each pair of the tile.
//
// Build-time parameters: MOE_TILE_M, MOE_LOCAL_I (work-group size, a multiple of the block),
// MOE_W4A4, MOE_NVFP4 (else MXFP4), MOE_E2M1_NO_DENORM.
//
//   x1 [slots, H]   FC1 inputs (moe_gather), each row [even | odd]
//   x2 [slots, I]   FC2 inputs, written here in the same split layout: BF16 values (W4A16) or
//                   e2m1 × block scale of their quantization (W4A4)
//   fc1_factor [E, 2]  per expert {gate, up}: dequant global scale × input global scale⁻¹ ×
//                   2^-(scale_exp + MOE_E2M1_EXP), so gate and up keep their own scales
//   fc2_input_scale [E]  W4A4 NVFP4: quant-direction global scale of the FC2 input
#include "common/quant_recipe.cl"
#include "moe_fp4_vec.cl"

#define TM MOE_TILE_M

__kernel __attribute__((reqd_work_group_size(MOE_LOCAL_I, 1, 1))) void moe_fc1(
    __global const uchar* w13, __global const uchar* w13_scales, __global const float* fc1_factor, int hidden,
    int inter, int scale_exp, __global const float* x1, __global const int* tiles, __global const int* chunk_info,
    __global const float* fc2_input_scale, __global float* x2) {
  const int tile = get_group_id(1);
  if (tile >= chunk_info[0]) return;  // the whole work-group: no barrier is skipped by part of it
  const int e = tiles[3 * tile], start = tiles[3 * tile + 1], count = tiles[3 * tile + 2];
  const int r = get_global_id(0), lid = get_local_id(0);
#if MOE_W4A4
  __local float a_local[TM * MOE_LOCAL_I];
#endif
  if (r < inter) {
    const long row_bytes = hidden / 2, row_scales = hidden / MOE_BLOCK;
    const long gate_row = (long)e * 2 * inter + r;
    const __global uchar* gate = w13 + gate_row * row_bytes;
    const __global uchar* up = gate + inter * row_bytes;
    const __global uchar* gate_s = w13_scales + gate_row * row_scales;
    const __global uchar* up_s = gate_s + inter * row_scales;
    const int odd_at = hidden / 2, chunks = hidden / 32;
    const __global float* xr[TM];
    float16 acc_g[TM], acc_u[TM];
    float tail_g[TM], tail_u[TM];
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      xr[m] = x1 + (long)(start + min(m, count - 1)) * hidden;  // rows past the tile repeat its last
      acc_g[m] = (float16)(0.0f);
      acc_u[m] = (float16)(0.0f);
      tail_g[m] = 0.0f;
      tail_u[m] = 0.0f;
    }
    for (int j = 0; j < chunks; ++j) {
      float16 gl, gh, ul, uh;
      MOE_LOAD_CHUNK(gate, gate_s, j, scale_exp, gl, gh);
      MOE_LOAD_CHUNK(up, up_s, j, scale_exp, ul, uh);
#pragma unroll
      for (int m = 0; m < TM; ++m) {
        const float16 ev = vload16(j, xr[m]), od = vload16(j, xr[m] + odd_at);
        acc_g[m] = fma(gl, ev, acc_g[m]);
        acc_g[m] = fma(gh, od, acc_g[m]);
        acc_u[m] = fma(ul, ev, acc_u[m]);
        acc_u[m] = fma(uh, od, acc_u[m]);
      }
    }
#ifdef MOE_NVFP4
    if (hidden % 32 != 0) {
      float8 gl, gh, ul, uh;
      MOE_LOAD_TAIL(gate, gate_s, chunks, scale_exp, gl, gh);
      MOE_LOAD_TAIL(up, up_s, chunks, scale_exp, ul, uh);
#pragma unroll
      for (int m = 0; m < TM; ++m) {
        const float8 ev = vload8(0, xr[m] + 16 * chunks), od = vload8(0, xr[m] + odd_at + 16 * chunks);
        tail_g[m] = moe_sum8(fma(gh, od, gl * ev));
        tail_u[m] = moe_sum8(fma(uh, od, ul * ev));
      }
    }
#endif
    const float2 f = vload2(e, fc1_factor);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      if (m < count) {
        const float g = (moe_sum16(acc_g[m]) + tail_g[m]) * f.x;
        const float u = (moe_sum16(acc_u[m]) + tail_u[m]) * f.y;
        const float a = moe_round_bf16(moe_silu(g) * u);
#if MOE_W4A4
        a_local[m * MOE_LOCAL_I + lid] = a;
#else
        x2[(long)(start + m) * inter + (r & 1) * (inter / 2) + r / 2] = a;
#endif
      }
    }
  }
#if MOE_W4A4
  // Quantize each block of the work-group's a values with the shared recipe.
  barrier(CLK_LOCAL_MEM_FENCE);
  const int blocks = MOE_LOCAL_I / MOE_BLOCK, r0 = get_group_id(0) * MOE_LOCAL_I;
#ifdef MOE_NVFP4
  const float gs = fc2_input_scale[e];
#endif
  for (int job = lid; job < TM * blocks; job += MOE_LOCAL_I) {
    const int m = job / blocks, rb = r0 + (job % blocks) * MOE_BLOCK;
    if (m >= count || rb >= inter) continue;
    const __local float* v = a_local + m * MOE_LOCAL_I + (job % blocks) * MOE_BLOCK;
    float amax = 0.0f;
    for (int i = 0; i < MOE_BLOCK; ++i) amax = fp4cl_amax_step(amax, v[i]);
#ifdef MOE_NVFP4
    const uint sb = nvfp4_scale_byte(amax, gs);
    const float mult = nvfp4_multiplier(sb, gs), s = e4m3_decode(sb);
#else
    const uint sb = mxfp4_scale_byte(amax);
    const float mult = mxfp4_multiplier(sb), s = e8m0_decode(sb);
#endif
    __global float* even = x2 + (long)(start + m) * inter + rb / 2;
    __global float* odd = even + inter / 2;
    for (int i = 0; i < MOE_BLOCK; i += 2) {
      even[i / 2] = e2m1_decode(fp4_encode_scaled(v[i], mult)) * s;
      odd[i / 2] = e2m1_decode(fp4_encode_scaled(v[i + 1], mult)) * s;
    }
  }
#endif
}
