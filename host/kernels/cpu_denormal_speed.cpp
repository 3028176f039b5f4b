#include "kernels/cpu_denormal_speed.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define FP4CL_HAS_MXCSR 1
#endif

namespace fp4cl {

namespace {

constexpr int kValues = 64, kChains = 8, kRounds = 16, kRuns = 5;

// Σ w[i] · x[r % 4][j] over rounds r, values i and chains j: kRounds · kValues · kChains
// multiplies, each with an operand of w. Not inlined, and its inputs come from volatile loads, so
// that the compiler can neither fold nor hoist the products.
[[gnu::noinline]] float multiply_run(const float* w, const float (*x)[kChains]) {
  float acc[kChains] = {};
  for (int r = 0; r < kRounds; ++r)
    for (int i = 0; i < kValues; ++i)
      for (int j = 0; j < kChains; ++j) acc[j] += w[i] * x[r % 4][j];
  float s = 0;
  for (const float a : acc) s += a;
  return s;
}

// Both sets of products lie near 2^-40 (normal): only the operand differs. Denormal w: (1..7) ×
// 2^-140 times 2^100; normal w: (1..7) × 2^-100 times 2^60.
double fastest_run_ns(bool denormal) {
  volatile float base_w = denormal ? 0x1p-140f : 0x1p-100f;
  volatile float base_x = denormal ? 0x1p100f : 0x1p60f;
  float w[kValues], x[4][kChains];
  for (int i = 0; i < kValues; ++i) w[i] = base_w * static_cast<float>(1 + i % 7);
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < kChains; ++j) x[r][j] = base_x * (1.0f + 0.125f * static_cast<float>((r + j) % 5));
  double best = std::numeric_limits<double>::infinity();
  volatile float sink = 0;
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + multiply_run(w, x);
    const auto end = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(end - start).count());
  }
  return best;
}

DenormalSpeed measure() {
#ifdef FP4CL_HAS_MXCSR
  // Denormals as a device that keeps them computes: neither flushed (FTZ, bit 15) nor read as zero
  // (DAZ, bit 6), whatever this process's floating-point environment says.
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved & ~0x8040u);
#endif
  DenormalSpeed s;
  fastest_run_ns(false);  // warm the code and the clock
  s.normal_ns = fastest_run_ns(false);
  s.denormal_ns = fastest_run_ns(true);
  s.normal_ns = std::min(s.normal_ns, fastest_run_ns(false));  // either side of the denormal runs
#ifdef FP4CL_HAS_MXCSR
  _mm_setcsr(saved);
#endif
  return s;
}

}  // namespace

const DenormalSpeed& host_denormal_speed() {
  static const DenormalSpeed speed = measure();
  return speed;
}

bool cpu_fp32_denormals_slow(const DeviceInfo& device) {
  return device.kind == DeviceKind::cpu && device.fp32_denormals && host_denormal_speed().slow();
}

}  // namespace fp4cl
