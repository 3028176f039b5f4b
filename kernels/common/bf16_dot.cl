// AVX-512 BF16 dot products of E2M1 weights with BF16 activations, on CPU devices (PoCL on x86):
// the pieces shared by the MoE expert GEMMs (moe_fp4_vec.cl, MOE_BF16DOT) and the linear GEMV
// for CPUs (linear_gemv_words.cl, WORDS_BF16DOT). OpenCL C has no such instructions; clang's x86
// builtins reach them inside functions that carry FP4_BF16_TARGET.
//
// The host defines FP4_DPBF16 for CPU devices whose processor (this process's) has AVX-512 BW,
// VBMI and BF16 and whose OpenCL compiler builds this code (host/kernels/cpu_bf16_dot.cpp builds
// kernels/bf16_dot_probe.cl once per device to know). __has_builtin answers for the base
// instruction set only, so the guard names the compilers this code is known to build with: clang
// 11 or later on x86-64 (Debian 12's PoCL 3.1 has LLVM 15). Then FP4_BF16DOT is 1, else 0 (and
// the probe's build fails: the layers take their other decode). vdpbf16ps (fp4_bf16_dot) is
// clang 11-15's builtin, whose operands are vectors of 16 ints; clang 16 takes vectors of 32
// __bf16 and died (SIGSEGV) compiling that form (PoCL 5.0 with LLVM 16 on an Intel Xeon with
// AVX-512 BF16 while it built the probe, and Debian 12's clang-16 16.0.6 compiling the probe for
// x86-64 alone, 2026-11-29), so from clang 16 on (or with FP4_BF16DOT_ASM defined: tests) it is
// inline assembly, the same instruction with the same embedded broadcast. clang-16 builds every
// BF16 kernel so; later versions are untested.
//
// The decode: 16 rows are the 16 lanes of a vector of 32-bit words, each word 8 consecutive
// elements of its row as 8 nibbles. For nibble pair p (nibbles p and p + 4), one vpsrld (none for
// p = 0) moves the two nibbles of every row into the low bits of the two 16-bit halves of the
// row's lane, one vpermw looks both up in a 32-entry table of the E2M1 values as BF16
// (fp4_bf16_quad_pair; the table twice over: vpermw reads 5 index bits, the fifth is the next
// nibble's), and one vdpbf16ps, its activation pair an embedded broadcast, adds both products to
// the row's fp32 sum: 3 vector instructions per 32 weights (2 for p = 0). (A vpmultishiftqb per
// pair, which picks any two nibbles, was the slowest part of the loop: README, PoCL section.) Activations must be BF16 numbers (W4A16: the input; W4A4: e2m1 × E4M3 scale, 6
// significant bits), so packing fp32 copies into BF16 pairs (fp4_bf16_pack) is exact, and BF16
// rows are the pairs already; E2M1 values have 2 significant bits, so products are exact in fp32
// and only the sums round (to nearest even).
//
// Denormals: vdpbf16ps flushes denormal inputs and results. An activation that is nonzero and
// below 2^-100 in magnitude is reported ("tiny") by fp4_bf16_pack and fp4_bf16_any_tiny; callers
// then compute with their fp32 decode instead. Above that, every product and partial sum that starts from 0
// is 0 or a multiple of 2^-108 (activation ulp >= 2^-107, E2M1 values multiples of 0.5), never
// denormal, so the flushing never acts and the sums are IEEE fp32 arithmetic's in this order.
#ifndef FP4CL_COMMON_BF16_DOT_CL
#define FP4CL_COMMON_BF16_DOT_CL

// 16 consecutive activations v (fp32 bits of BF16 numbers) as the 8 BF16 pairs that the MoE BF16
// dot products read for them (moe_fp4_vec.cl: the checkpoint's nibble order pairs elements j and
// j + 4 of each 8): pair 4q + p = bf16(v[8q + p]) | bf16(v[8q + p + 4]) << 16 (the high halves:
// exact for BF16 numbers). Plain OpenCL C: the producers (moe_gather, moe_fc1) write them.
inline uint8 moe_bf16_quads16(uint16 v) {
  const uint8 lo = (uint8)(v.s0123, v.s89ab), hi = (uint8)(v.s4567, v.scdef);
  return (lo >> 16) | (hi & 0xFFFF0000u);
}

#if defined(FP4_DPBF16) && defined(__clang__) && defined(__x86_64__)
#if __clang_major__ >= 11
#define FP4_BF16DOT 1
#endif
#endif
#ifndef FP4_BF16DOT
#define FP4_BF16DOT 0
#endif
#if FP4_BF16DOT && __clang_major__ >= 16 && !defined(FP4_BF16DOT_ASM)
#define FP4_BF16DOT_ASM 1
#endif

#if FP4_BF16DOT
#define FP4_BF16_TARGET __attribute__((target("avx512bw,avx512vbmi,avx512bf16")))
typedef char fp4_v64qi __attribute__((vector_size(64)));
typedef short fp4_v32hi __attribute__((vector_size(64)));
typedef float fp4_v16sf __attribute__((vector_size(64)));
typedef int fp4_v16si __attribute__((vector_size(64)));

// Lanes set where the fp32 value v is nonzero and below 2^-100 in magnitude.
inline uint16 fp4_bf16_tiny_f32(uint16 v) {
  return as_uint16((v & 0x7F800000u) < (27u << 23) & (v & 0x7FFFFFFFu) != 0u);
}

// Lanes set where either BF16 half of the packed pair v is nonzero and below 2^-100 in magnitude.
inline uint8 fp4_bf16_tiny_pairs(uint8 v) {
  return as_uint8(((v & 0x7F80u) < (27u << 7) & (v & 0x7FFFu) != 0u) |
                  ((v & 0x7F800000u) < (27u << 23) & (v & 0x7FFF0000u) != 0u));
}

// Whether any of the BF16 values in the first n_pairs pairs at p (BF16 numbers packed two to a
// uint; n_pairs a multiple of 8) is nonzero and below 2^-100 in magnitude: (h & 0x7FFF) - 1 <
// (27 << 7) - 1 in 16-bit lanes, 32 values per step.
typedef ushort fp4_v32hu __attribute__((vector_size(64)));
typedef short fp4_v32hi_mask __attribute__((vector_size(64)));
FP4_BF16_TARGET inline int fp4_bf16_any_tiny(const __global uint* p, uint n_pairs) {
  fp4_v32hi_mask found = __builtin_astype((uint16)(0u), fp4_v32hi_mask);
  for (uint i = 0; i < n_pairs / 16u; ++i) {
    const fp4_v32hu h = __builtin_astype(vload16(i, p), fp4_v32hu);
    found |= (fp4_v32hi_mask)(((h & (ushort)0x7FFF) - (ushort)1) < (ushort)((27 << 7) - 1));
  }
  int tiny = any(__builtin_astype(found, int16) != 0);
  if (n_pairs % 16u != 0) tiny |= any(as_int8(fp4_bf16_tiny_pairs(vload8(n_pairs / 8u - 1u, p))) != 0);
  return tiny;
}

// The BF16 pairs of n elements of the fp32 row x (n a multiple of 16): xp[i] = bf16(x[2i]) |
// bf16(x[2i+1]) << 16 (the high halves: exact for BF16 numbers). Lanes of *tiny as above.
inline void fp4_bf16_pack(const __global float* x, uint* xp, int n, uint16* tiny) {
  for (int c = 0; c < n / 16; ++c) {
    const uint16 v = vload16(c, (const __global uint*)x);
    *tiny |= fp4_bf16_tiny_f32(v);
    vstore8((v.even >> 16) | (v.odd & 0xFFFF0000u), c, xp);
  }
}

// The E2M1 values as BF16, indexed by the nibble (sign in bit 3).
#define FP4_BF16_E2M1                                                                                          \
  (ushort16)(0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0, \
             0xC000, 0xC040, 0xC080, 0xC0C0)

// The 32-entry vpermw table: FP4_BF16_E2M1 twice over.
FP4_BF16_TARGET inline fp4_v32hi fp4_bf16_table(void) {
  const ushort16 t = FP4_BF16_E2M1;
  return __builtin_astype((uint16)(as_uint8(t), as_uint8(t)), fp4_v32hi);
}

// The E2M1 values of nibble p (low half) and nibble p + 4 (high half) of each lane's 32-bit word w
// as BF16 (p = 0..3): the vpermw index is the word shifted right by 4p (one vpsrld, none for
// p = 0); vpermw reads the low 5 bits of each 16-bit half, the nibble and a fifth bit that the
// doubled table ignores. Which elements these are is the layout's choice: MoE's words hold the
// checkpoint's order (elements 8g + p and 8g + p + 4; its activations are packed to match,
// moe_bf16_pack_quads), gemv_words's hold pair order (elements 8g + 2p and 8g + 2p + 1, so that
// the activation pair is two adjacent BF16 values; host/prepare/fp4_words_layout.hpp).
FP4_BF16_TARGET inline fp4_v16si fp4_bf16_quad_pair(fp4_v32hi table, uint16 w, int p) {
  return (fp4_v16si)__builtin_ia32_permvarhi512(table, __builtin_astype(p == 0 ? w : w >> (uint)(4 * p), fp4_v32hi));
}

// acc + the two products of each lane's BF16 weight pair d with the activation pair xp (a uint
// lvalue in global memory: a BF16 pair, broadcast to every lane; clang 11-15 compile the builtin's
// broadcast into the instruction's embedded one, which the assembly names). A macro, so that the
// builtin's form reads xp as the callers wrote it (their code is unchanged) and the assembly's
// takes its address.
#ifdef FP4_BF16DOT_ASM
FP4_BF16_TARGET inline fp4_v16sf fp4_bf16_dot_asm(fp4_v16sf acc, fp4_v16si d, const __global uint* xp) {
  __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(d), "m"(*xp));
  return acc;
}
#define fp4_bf16_dot(acc, d, xp) fp4_bf16_dot_asm((acc), (d), &(xp))
#else
#define fp4_bf16_dot(acc, d, xp) \
  __builtin_ia32_dpbf16ps_512((acc), (d), __builtin_astype((uint16)(xp), fp4_v16si))
#endif
#endif

#endif  // FP4CL_COMMON_BF16_DOT_CL
