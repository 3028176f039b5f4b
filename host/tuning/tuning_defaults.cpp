#include "tuning/tuning_defaults.hpp"

#include "support/check.hpp"

namespace fp4cl::tuning {

namespace {

bool cpu(DeviceKind kind) { return kind == DeviceKind::cpu; }

}  // namespace

const char* default_class_name(DeviceKind kind) { return cpu(kind) ? "CPU" : "GPU"; }

Params linear_default_params(DeviceKind kind, const std::string& kernel) {
  if (kernel == "gemv_rows") {
    // PoCL runs a work-group as a loop over its work-items: small groups of long rows are best
    // (DEVICES.md); the E2M1 table decode compiles to byte shuffles there (kernels/common/fp4_dot.cl).
    // GPUs want enough work-items per group to fill a multiprocessor, and decode with bit tricks.
    return {{"GEMV_TOKENS", 4},
            {"GEMV_LOCAL", cpu(kind) ? 1 : 64},
            {"FP4CL_VEC", 16},
            {"GEMV_DECODE_LUT", cpu(kind) ? 1 : 0}};
  }
  if (kernel == "gemv_lanes") {
    // One group of 8 rows per work-item, one work-item per group on PoCL (DEVICES.md).
    return {{"LANES_TOKENS", 4}, {"LANES_LOCAL", cpu(kind) ? 1 : 64}};
  }
  if (kernel == "gemv_split") {
    // GPUs: 32 lanes per row (a warp streams 512 contiguous bytes of one row per step), 256
    // work-items = 8 rows per work-group (512 work-groups at N = 4096, 256 at N = 2048 for 132
    // compute units), up to 8 tokens per work-group, 32 KiB of staged activations (one step of
    // 8 tokens at 32 lanes); W4A4 calls of 2 or more tokens quantize their activations in the
    // pre-pass (once, instead of in each of the hundreds of work-groups). CPUs (only when forced):
    // smaller groups, as PoCL loops over work-items.
    if (cpu(kind))
      return {{"SPLIT_LANES", 8},  {"SPLIT_LOCAL", 32},   {"SPLIT_RPG", 1},
              {"SPLIT_TOKENS", 8}, {"SPLIT_STAGE", 4096}, {"SPLIT_PREPASS_TOKENS", 2}};
    return {{"SPLIT_LANES", 32}, {"SPLIT_LOCAL", 256},  {"SPLIT_RPG", 1},
            {"SPLIT_TOKENS", 8}, {"SPLIT_STAGE", 8192}, {"SPLIT_PREPASS_TOKENS", 2}};
  }
  if (kernel == "gemv_words") {
    // One group of 16 rows per work-item, one work-item per group on PoCL (DEVICES.md). The
    // weights prefetched 32 chunks (4 KB) ahead in the BF16 loop: one PoCL thread streamed ~16
    // GB/s without, where the probe reads ~30 (README, PoCL section).
    return {{"WORDS_TOKENS", 4}, {"WORDS_LOCAL", cpu(kind) ? 1 : 64}, {"WORDS_PREFETCH", cpu(kind) ? 32 : 0}};
  }
  if (kernel == "gemv_denorm") return {{"DENORM_TOKENS", 4}, {"DENORM_LOCAL", cpu(kind) ? 1 : 64}};
  if (kernel == "gemv_int") {
    // The weights prefetched 64 chunks (4 KB) ahead into L2 on CPUs: 4096x4096 W4A4 M = 1 on 2 AVX2
    // cores ~510 -> ~365 µs median (kernels/linear_gemv_int.cl).
    return {{"INT_TOKENS", 4}, {"INT_LOCAL", cpu(kind) ? 1 : 64}, {"INT_PREFETCH", cpu(kind) ? 64 : 0}};
  }
  if (kernel == "gemm_tiled") {
    // PoCL: 32 work-items per group, each with 4 tokens × 2 vectors of 16 rows of float16
    // accumulators (GEMM_WI_N 2: per k two weight loads and 4 broadcasts feed 16 FMAs, where one
    // vector of rows needs a load per FMA); a 256 × 32 panel (32 KiB) stays in L1/L2 while 128
    // tokens reuse it, which amortizes the decode and transposed stores. Measured on 2 AVX-512
    // cores (PoCL, Intel Xeon, 2026-11-28, 2 alternating rounds, NVFP4 W4A16, ms, M = 64 / 512)
    // against 128 × 16 tiles of one vector (GEMM_WI_N 1): 4096² 25.4–26.0 / 173.9–174.5 →
    // 18.2–20.0 / 97.0–98.6; 2048 × 768 2.49–2.62 / 11.0–11.4 → 1.99–2.04 / 8.8–9.0; 1536 × 2048
    // 5.0–5.2 / 21.2–21.4 → 3.5–3.9 / 17.6–18.0 (4096² M = 512 W4A4 164 → 93, MXFP4 169 → 93).
    // GPUs: more work-items.
    if (cpu(kind))
      return {{"GEMM_TILE_M", 128}, {"GEMM_TILE_N", 32}, {"GEMM_TILE_K", 256},
              {"GEMM_WI_M", 4},     {"GEMM_WI_N", 2},     {"FP4CL_VEC", 16}};
    return {{"GEMM_TILE_M", 64}, {"GEMM_TILE_N", 64}, {"GEMM_TILE_K", 128},
            {"GEMM_WI_M", 4},    {"GEMM_WI_N", 1},    {"FP4CL_VEC", 16}};
  }
  if (kernel == "mma") {
    // Tensor cores (kernels/linear_mma.cl): token tiles of up to 32 tokens, one row tile per
    // work-group, K split from the shape (mma_auto_split_k), 4 chunks of weights loaded ahead (the
    // MoE mma strategy's measured best, bench/gpu/results-h100.md). CPUs run the emulation (tests
    // only): no unrolling, which buys nothing there. W4A4 calls of one token quantize it inside
    // the kernel (one launch fewer), larger ones in the pre-pass.
    return {{"MMA_NT", 4},
            {"MMA_MT", 1},
            {"MMA_RT", 1},
            {"MMA_KSPLIT", 0},
            {"MMA_UNROLL", cpu(kind) ? 1 : 4},
            {"MMA_QUANT_TOKENS", 1}};
  }
  fail("no built-in tuning for linear kernel '{}'", kernel);
}

bool linear_wide_cpu(DeviceKind kind, unsigned float_width) { return kind == DeviceKind::cpu && float_width >= 16; }

std::int64_t linear_default_decode_max_tokens(DeviceKind kind, unsigned float_width) {
  // GPUs, and CPUs with vectors of fewer than 16 floats (AVX2): measured on PoCL before gemm_tiled's
  // register tile (fp4cl-bench linear, 2048×2048 NVFP4 W4A16, GFLOP/s per CPU-second): GEMV 18 / 17
  // / 18 at m = 16 / 32 / 64, tiled GEMM 6 / 13 / 22: the GEMV wins up to about 48 tokens.
  // CPUs with 16 floats a vector (AVX-512): the decode kernel (gemv_words there) and gemm_tiled
  // are level from 48 to 64 tokens, gemm_tiled ahead from 96. PoCL, 2 AVX-512 cores (the CI
  // machine), 2026-11-28, built-in parameters, gemm_tiled skipping the work of tokens past the
  // call's last, 2 rounds, ms, gemv_words against gemm_tiled at M = 32 / 48 / 64 / 96: 4096x4096
  // W4A16 6.6, 6.4 / 9.9, 9.7 / 13.0, 13.3 / 19.5, 19.3 against 8.7, 8.2 / 9.7, 9.8 / 12.5, 11.5 /
  // 17.0, 17.2; W4A4 6.0, 6.2 / 9.4, 9.0 / 12.2, 11.9 / 18.1, 18.2 against 8.7, 8.3 / 9.9, 10.0 /
  // 11.5, 11.7 / 17.8, 17.4; 1536x2048 W4A16 1.27, 1.20 / 1.84, 1.78 / 2.52, 2.44 / 3.67, 3.65
  // against 1.67, 1.66 / 1.98, 1.99 / 2.25, 2.29 / 2.96, 2.94; W4A4 1.21, 1.22 / 1.82 / 2.43, 2.41 /
  // 3.58, 3.56 against 1.73, 1.85 / 2.08, 2.02 / 2.49, 2.42 / 3.15, 3.50; 2048x768 W4A16 0.66, 0.61
  // / 0.97, 0.91 / 1.20, 1.24 / 1.86, 1.79 against 0.86, 0.85 / 1.12, 1.02 / 1.37, 1.22 / 1.75,
  // 1.62; W4A4 0.62, 0.59 / 0.90, 0.87 / 1.19, 1.15 / 1.78, 1.74 against 0.95, 0.93 / 1.09, 1.07 /
  // 1.30, 1.25 / 1.74, 1.68. (Before that skip gemm_tiled computed whole tiles of 128 tokens, 17 ms
  // at 4096x4096 for 32 tokens as for 64, and gemv_words led up to 96.)
  if (linear_wide_cpu(kind, float_width)) return 64;
  return 32;
}

}  // namespace fp4cl::tuning
