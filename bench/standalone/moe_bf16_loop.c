// The MoE FC1 decode loop of kernels/moe_fp4_vec.cl (MOE_BF16DOT, one pair) as a plain C program,
// without OpenCL or PoCL's scheduling: to tell what the loop itself costs on an AVX-512 BF16 CPU
// from what the runtime adds (README, "MoE decode on PoCL, T = 1 after the BF16 dot products").
// Shapes of qwen3-30b-a3b (H 2048, I 768, 128 experts, 8 per token), the weight layout of
// host/layers/moe_weights.cpp (groups of 16 rows, their 32-bit words of 8 elements side by side,
// fp16 block scales); each call picks 8 random experts, so the weights come from DRAM (or, with
// --hot, one row group over and over: from L2). Reports CPU time per call (all threads), median
// of 400 calls. Values are not checked (the tests do that for the kernel); only the instruction
// stream and the memory traffic are the kernel's.
//
//   clang -O2 -march=skylake-avx512 -mavx512vbmi -mavx512bf16 bench/standalone/moe_bf16_loop.c \
//         -o moe_bf16_loop -lpthread
//   ./moe_bf16_loop {read|multishift|quads|quads-pack} THREADS [--hot]
//
// The target as PoCL's (LLVM 15 names this Zen 4 skylake-avx512; the kernels' BF16 functions add
// the same features). clang 15's -march=native here is znver3 with AVX-512, which turned the
// lookups into two-table vpermt2w and ran quads at 17-25 GB/s per core instead of 32.
//
// read: only loads the bytes; multishift: element pairs (2p, 2p + 1) by vpmultishiftqb (the loop
// before 2026-11-24 04:45); quads: pairs (j, j + 4) by vpsrld (kernels/moe_fp4_vec.cl now);
// quads-pack: quads plus each row group packing its activations into BF16 pairs as each work-item does.
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H = 2048, I = 768, E = 128, K = 8, G = I / 16, WORDS = H / 8 * 16, SCALES = H / 16 * 16 };
enum Variant { READ, MULTISHIFT, QUADS, QUADS_PACK };

static uint32_t *gate_w, *up_w;
static uint16_t *gate_s, *up_s;
static float x[H], out[2][K][I];
static int experts[K], threads, hot;
static enum Variant variant;

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline __m512i pair_index(__m512i w, int p) {
  if (variant == MULTISHIFT) {
    const uint32_t lo = 0x04040000u + 0x08080808u * (uint32_t)p, hi = lo + 0x20202020u;
    return _mm512_multishift_epi64_epi8(_mm512_set_epi32(hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo), w);
  }
  return p == 0 ? w : _mm512_srli_epi32(w, 4 * p);
}

// The 16 rows of row group `grp` of expert e: gate and up sums over H.
static void row_group(int e, int grp, float* og, float* ou) {
  static const uint16_t e2m1[16] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
                                    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
  uint16_t t32[32];
  memcpy(t32, e2m1, 32);
  memcpy(t32 + 16, e2m1, 32);
  const __m512i table = _mm512_loadu_si512(t32);
  const size_t at = (size_t)e * G + (size_t)grp;
  const uint32_t *wg = gate_w + at * WORDS, *wu = up_w + at * WORDS;
  const uint16_t *sg = gate_s + at * SCALES, *su = up_s + at * SCALES;
  if (variant == READ) {
    __m512i r = _mm512_setzero_si512();
    for (int g = 0; g < H / 8; ++g) r = _mm512_xor_si512(r, _mm512_xor_si512(_mm512_load_si512(wg + 16 * g), _mm512_load_si512(wu + 16 * g)));
    for (int b = 0; b < H / 16; b += 2) r = _mm512_xor_si512(r, _mm512_xor_si512(_mm512_load_si512(sg + 16 * b), _mm512_load_si512(su + 16 * b)));
    _mm512_storeu_si512(og, r);
    return;
  }
  static __thread uint32_t xp[H / 2];
  static uint32_t xp_once[H / 2];
  const uint32_t* xs = xp_once;
  if (variant == QUADS_PACK) {  // pairs (x[8q + p], x[8q + p + 4]), as moe_bf16_pack_quads
    for (int c = 0; c < H / 8; ++c)
      for (int p = 0; p < 4; ++p) {
        uint32_t lo, hi;
        memcpy(&lo, &x[8 * c + p], 4);
        memcpy(&hi, &x[8 * c + p + 4], 4);
        xp[4 * c + p] = (lo >> 16) | (hi & 0xFFFF0000u);
      }
    xs = xp;
  }
  __m512 acc_g = _mm512_setzero_ps(), acc_u = _mm512_setzero_ps();
  for (int b = 0; b < H / 16; ++b) {
    __m512 a = _mm512_setzero_ps(), c = a, d = a, f = a;
    for (int q = 0; q < 2; ++q) {
      const __m512i u = _mm512_load_si512(wg + 16 * (2 * b + q)), v = _mm512_load_si512(wu + 16 * (2 * b + q));
      for (int p = 0; p < 4; ++p) {
        const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xs[8 * b + 4 * q + p]);
        const __m512bh du = (__m512bh)_mm512_permutexvar_epi16(pair_index(u, p), table);
        const __m512bh dv = (__m512bh)_mm512_permutexvar_epi16(pair_index(v, p), table);
        if (p % 2 == 0) {
          a = _mm512_dpbf16_ps(a, du, xv);
          d = _mm512_dpbf16_ps(d, dv, xv);
        } else {
          c = _mm512_dpbf16_ps(c, du, xv);
          f = _mm512_dpbf16_ps(f, dv, xv);
        }
      }
    }
    const __m512 s1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(sg + 16 * b)));
    const __m512 s2 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(su + 16 * b)));
    acc_g = _mm512_fmadd_ps(_mm512_add_ps(a, c), s1, acc_g);
    acc_u = _mm512_fmadd_ps(_mm512_add_ps(d, f), s2, acc_u);
  }
  _mm512_storeu_ps(og, acc_g);
  _mm512_storeu_ps(ou, acc_u);
}

// Thread t takes a contiguous share of the K·G (expert, row group) jobs, as PoCL's chunks do.
static void* worker(void* arg) {
  const int t = (int)(intptr_t)arg, jobs = K * G;
  for (int j = jobs * t / threads; j < jobs * (t + 1) / threads; ++j)
    row_group(hot ? 0 : experts[j / G], hot ? 0 : j % G, out[0][j / G] + 16 * (j % G), out[1][j / G] + 16 * (j % G));
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  static const char* names[] = {"read", "multishift", "quads", "quads-pack"};
  variant = (enum Variant)-1;
  for (int v = 0; v < 4 && argc >= 3; ++v)
    if (strcmp(argv[1], names[v]) == 0) variant = (enum Variant)v;
  threads = argc >= 3 ? atoi(argv[2]) : 0;
  hot = argc >= 4 && strcmp(argv[3], "--hot") == 0;
  if ((int)variant < 0 || threads < 1 || threads > 16) {
    fprintf(stderr, "usage: %s {read|multishift|quads|quads-pack} THREADS(1-16) [--hot]\n", argv[0]);
    return 2;
  }
  const size_t words = (size_t)E * G * WORDS, scales = (size_t)E * G * SCALES;
  gate_w = aligned_alloc(64, words * 4);
  up_w = aligned_alloc(64, words * 4);
  gate_s = aligned_alloc(64, scales * 2);
  up_s = aligned_alloc(64, scales * 2);
  if (!gate_w || !up_w || !gate_s || !up_s) {
    fprintf(stderr, "out of memory (%zu MB of weights)\n", (words * 8 + scales * 4) >> 20);
    return 1;
  }
  for (size_t i = 0; i < words; ++i) gate_w[i] = up_w[i] = (uint32_t)(i * 2654435761u);
  for (size_t i = 0; i < scales; ++i) gate_s[i] = up_s[i] = 0x3C00;
  for (int i = 0; i < H; ++i) x[i] = 1.0f;
  const double bytes = (double)K * G * (WORDS * 4.0 + SCALES * 2.0) * 2.0;
  enum { CALLS = 400 };
  double t[CALLS];
  srand(1);
  for (int call = 0; call < CALLS; ++call) {
    for (int k = 0; k < K; ++k) experts[k] = rand() % E;
    const double t0 = cpu_seconds();
    pthread_t th[16];
    for (int i = 1; i < threads; ++i) pthread_create(&th[i], NULL, worker, (void*)(intptr_t)i);
    worker(0);
    for (int i = 1; i < threads; ++i) pthread_join(th[i], NULL);
    t[call] = cpu_seconds() - t0;
  }
  qsort(t, CALLS, sizeof t[0], by_value);
  printf("%s, %d thread(s)%s: %.0f us of CPU per call (median; best %.0f), %.1f GB/s of weights per CPU-second (%.1f MB a call)\n",
         names[variant], threads, hot ? ", one row group (L2)" : "", t[CALLS / 2] * 1e6, t[0] * 1e6,
         bytes / t[CALLS / 2] / 1e9, bytes / 1e6);
  return out[0][0][0] != out[0][0][0];  // keeps the sums live
}
