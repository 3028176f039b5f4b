#include "kernels/cpu_bf16_dot.hpp"

#include <string>

#include "support/check.hpp"
#include "support/env_switch.hpp"

namespace fp4cl {

namespace {

// Whether this process's processor has AVX-512 BW, VBMI and BF16.
bool host_has_avx512_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

std::string choice_of(const char* env) {
  return env_switch(env, {"0", "1"}, "0 (off) or 1 (on; the CPU must have AVX-512 BF16)");
}

}  // namespace

bool cpu_bf16_dot_enabled(const Context& ctx, const char* env) {
  const std::string choice = choice_of(env);
  if (choice == "0") return false;
  const bool can = ctx.info().kind == DeviceKind::cpu && host_has_avx512_bf16();
  if (choice == "1" && !can)
    fail("{} = 1, but {} is not a CPU device on a processor with AVX-512 BW, VBMI and BF16", env, ctx.info().name);
  return can;
}

bool cpu_bf16_dot_required(const char* env) { return choice_of(env) == "1"; }

}  // namespace fp4cl
