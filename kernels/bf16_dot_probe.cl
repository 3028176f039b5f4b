// Built once per CPU device by host/kernels/cpu_bf16_dot.cpp, with FP4_DPBF16 defined, to learn
// whether the device's OpenCL compiler builds the AVX-512 BF16 dot products of common/bf16_dot.cl
// (the forms of its builtins changed between clang versions). Every piece the MoE and linear
// kernels use appears here; a compiler outside the header's guard fails the build (#error), and
// so does one whose builtins take other operand types.
#include "common/bf16_dot.cl"

#if !FP4_BF16DOT
#error "common/bf16_dot.cl knows no AVX-512 BF16 builtins of this OpenCL compiler"
#endif

// y[0..15] = the sums of 16 rows of E2M1 weights w (one word a row, nibble pairs 0 and 1) with the
// BF16 activation pairs x[0], x[1], unless an activation is tiny (fp4_bf16_any_tiny). As in the
// MoE and linear kernels, the code with the target attribute is a function the kernel calls.
FP4_BF16_TARGET __attribute__((noinline)) void bf16_dot_probe_sums(const __global uint* w, const __global uint* x,
                                                                   __global float* y) {
  const fp4_v32hi table = fp4_bf16_table();
  const uint16 words = vload16(0, w);
  fp4_v16sf acc = __builtin_astype((float16)(0.0f), fp4_v16sf);
  acc = fp4_bf16_dot(acc, fp4_bf16_quad_pair(table, words, 0), x[0]);
  acc = fp4_bf16_dot(acc, fp4_bf16_quad_pair(table, words, 1), x[1]);
  if (!fp4_bf16_any_tiny(x, 16)) vstore16(__builtin_astype(acc, float16), 0, y);
}

__kernel void bf16_dot_probe(const __global uint* w, const __global uint* x, __global float* y) {
  bf16_dot_probe_sums(w, x, y);
}
