// fp4cl-soak: MoE forwards under load. Several threads, each with its own command queue over one
// OpenCL context and its own MoE layer (a different scheme per thread), run forward after forward
// with varying token counts (some beyond the layer's capacity: chunked) and varying routing (top-k
// ids, with repeated experts now and then, or router logits). Every --check-every forwards a
// thread compares its output with the scalar reference (host/reference/moe_reference.hpp). The
// main thread samples the resident set size (/proc/self/statm) after the warm-up and then ten
// times a second; the run fails when it grows by more than --rss-tolerance-mb, when a device
// buffer allocated after the warm-up is still alive at the end, or on any wrong output or error.
//
// Under FP4CL_FAULT_INJECT (host/cl/fault_injection.hpp) with --expect-faults, forwards that fail
// with an injected fault are counted instead, and the forward after each is checked against the
// reference: the layer must recover. --inject wrong-output|leak makes the tool break itself (a
// flipped output bit; 1 MiB of device memory kept per forward) so that its checks can be shown to
// fail (the ctest self-tests expect failure).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cl/fault_injection.hpp"
#include "common/formats.cl"
#include "fp4cl/context.hpp"
#include "fp4cl/device.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"
#include "reference/moe_reference.hpp"

namespace fp4cl::soak {
namespace {

struct Options {
  double seconds = 5.0;
  int threads = 2;
  int check_every = 10;
  int warmup = 10;
  std::int64_t max_tokens = 40;  // the largest token count of a forward
  std::int64_t capacity = 32;    // the layers' MoeConfig::max_tokens
  std::int64_t experts = 16, hidden = 128, intermediate = 128;
  int top_k = 4;
  double rss_tolerance_mb = 24.0;
  bool expect_faults = false;
  std::string inject;  // "", "wrong-output", "leak"
  std::uint64_t seed = 1;
};

using Clock = std::chrono::steady_clock;

// Under AddressSanitizer freed memory sits in its quarantine (hundreds of MiB): the resident set
// says nothing about leaks there, LeakSanitizer checks them at exit instead.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssMeaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRssMeaningful = false;
#else
constexpr bool kRssMeaningful = true;
#endif
#else
constexpr bool kRssMeaningful = true;
#endif

std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint16_t bf16_bits(float v) { return static_cast<std::uint16_t>(float_to_bf16(v)); }

// Experts with moderate magnitudes: random codes, block scales over a few octaves, power-of-two
// global scales (NVFP4) and FC1/FC2 input scales for W4A4.
Fp4Experts make_experts(WeightFormat format, const Options& o, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp4Experts ex;
  ex.format = format;
  ex.num_experts = o.experts;
  ex.hidden = o.hidden;
  ex.intermediate = o.intermediate;
  const auto E = static_cast<std::size_t>(o.experts), H = static_cast<std::size_t>(o.hidden),
             I = static_cast<std::size_t>(o.intermediate), B = static_cast<std::size_t>(block_size(format));
  std::uniform_int_distribution<int> byte(0, 255);
  ex.w13_packed.resize(E * 2 * I * H / 2);
  ex.w2_packed.resize(E * H * I / 2);
  for (auto* v : {&ex.w13_packed, &ex.w2_packed})
    for (auto& b : *v) b = static_cast<std::uint8_t>(byte(rng));
  const bool nv = format == WeightFormat::nvfp4;
  // NVFP4: E4M3 0.5 .. 2; MXFP4: 2^-6 .. 2^-3 (the magnitude a global scale would carry).
  std::uniform_int_distribution<int> scale(nv ? 0x30 : 121, nv ? 0x40 : 124);
  ex.w13_scales.resize(E * 2 * I * H / B);
  ex.w2_scales.resize(E * H * I / B);
  for (auto* v : {&ex.w13_scales, &ex.w2_scales})
    for (auto& b : *v) b = static_cast<std::uint8_t>(scale(rng));
  if (nv) {
    std::vector<float> fc1, fc2;
    for (std::size_t e = 0; e < E; ++e) {
      ex.w13_global_scale.push_back(std::ldexp(1.0f, -5 - static_cast<int>(e % 2)));
      ex.w13_global_scale.push_back(std::ldexp(1.0f, -5));
      ex.w2_global_scale.push_back(std::ldexp(1.0f, -5));
      fc1.push_back(3.0f * std::ldexp(1.0f, 6 + static_cast<int>(e % 3)));
      fc2.push_back(std::ldexp(1.0f, 6));
    }
    ex.set_input_scales_from_quant(std::move(fc1), std::move(fc2));
  } else {
    ex.w13_global_scale.assign(2 * E, 1.0f);
    ex.w2_global_scale.assign(E, 1.0f);
  }
  return ex;
}

struct Totals {
  std::atomic<std::int64_t> forwards{0}, checks{0}, faults{0}, recoveries{0}, tokens{0};
  std::atomic<int> warm{0};
  std::atomic<bool> failed{false}, stop{false};
  std::mutex message_mutex;
  std::vector<std::string> messages;

  void fail(std::string message) {
    failed = true;
    std::lock_guard<std::mutex> lock(message_mutex);
    if (messages.size() < 20) messages.push_back(std::move(message));
  }
};

cl::Buffer device_copy(const Context& ctx, const void* data, std::size_t bytes) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, std::max<std::size_t>(bytes, 4),
               const_cast<void*>(data), &err);
  if (err != CL_SUCCESS) throw Error("fp4cl-soak: allocating an input buffer", err);
  return b;
}

// One worker: its own queue over the shared context, its own layer, `scheme`.
void worker(int index, const Context& shared, const QuantScheme& scheme, const Options& o, Totals& totals) {
  const std::string name = fmt::format("thread {} ({})", index, scheme.name());
  try {
    // The status FP4CL_FAULT_INJECT makes calls fail with (0: none).
    const char* spec = std::getenv("FP4CL_FAULT_INJECT");
    const int injected_status = spec && *spec ? fault_injection::parse_plan(spec).status : 0;
    cl_int err = CL_SUCCESS;
    cl_command_queue raw = ::clCreateCommandQueue(shared.opencl_context()(), shared.device()(), 0, &err);
    if (err != CL_SUCCESS) throw Error("fp4cl-soak: creating a command queue", err);
    const Context ctx = Context::wrap(shared.opencl_context()(), raw);
    ::clReleaseCommandQueue(raw);  // the Context holds its own reference

    const Fp4Experts ex = make_experts(scheme.weight, o, o.seed * 1000 + static_cast<std::uint64_t>(index));
    MoeConfig cfg;
    cfg.scheme = scheme;
    cfg.top_k = o.top_k;
    cfg.max_tokens = o.capacity;
    MoeLayer layer = MoeLayer::create(ctx, ex, cfg);
    reference::MoeReferenceOptions ref_options;
    ref_options.scheme = scheme;

    std::mt19937_64 rng(o.seed * 7919 + static_cast<std::uint64_t>(index));
    std::uniform_int_distribution<std::int64_t> tokens_of(1, o.max_tokens);
    std::uniform_int_distribution<int> grid(-16, 16), expert(0, static_cast<int>(o.experts - 1)), coin(0, 9);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f), logit(-4.0f, 4.0f);
    std::vector<cl::Buffer> leaked;
    std::vector<std::vector<std::uint8_t>> leaked_host;
    bool check_next = false;
    const auto H = static_cast<std::size_t>(o.hidden);

    // The warm-up runs every token count once with each routing (the driver compiles kernels per
    // launch shape: the memory that takes belongs before the baseline), then --warmup random ones.
    const std::int64_t sweep = 2 * o.max_tokens, warmup = sweep + o.warmup;
    for (std::int64_t i = 0; !totals.stop; ++i) {
      if (i == warmup) ++totals.warm;
      const std::int64_t T = i < sweep ? i / 2 + 1 : tokens_of(rng);
      const auto n = static_cast<std::size_t>(T);
      std::vector<std::uint16_t> x(n * H);
      for (auto& v : x) v = bf16_bits(static_cast<float>(grid(rng)) / 8.0f);
      const bool logits = i < sweep ? i % 2 == 1 : coin(rng) < 3;
      std::vector<std::int32_t> ids(n * static_cast<std::size_t>(o.top_k));
      std::vector<float> weights(ids.size()), router(logits ? n * static_cast<std::size_t>(o.experts) : 0);
      for (std::size_t j = 0; j < ids.size(); ++j) {
        ids[j] = expert(rng);  // repeats within a row happen: each slot counts on its own
        weights[j] = weight(rng);
      }
      for (auto& v : router) v = logit(rng);

      std::vector<std::uint16_t> out(n * H);
      try {
        const cl::Buffer xb = device_copy(ctx, x.data(), x.size() * 2);
        cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, out.size() * 2, nullptr, &err);
        if (err != CL_SUCCESS) throw Error("fp4cl-soak: allocating the output", err);
        if (logits) {
          layer.forward_logits(xb, device_copy(ctx, router.data(), router.size() * 4), ob, T);
        } else {
          layer.forward_topk(xb, device_copy(ctx, ids.data(), ids.size() * 4),
                             device_copy(ctx, weights.data(), weights.size() * 4), ob, T);
        }
        err = ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, out.size() * 2, out.data());
        if (err != CL_SUCCESS) throw Error("fp4cl-soak: reading the output", err);
      } catch (const Error& e) {
        if (o.expect_faults && e.cl_status() == injected_status) {
          ++totals.faults;
          check_next = true;  // the layer must recover: check the next forward
          continue;
        }
        throw;
      }
      if (o.inject == "leak") {
        // 1 MiB of device memory written and kept: what a leak in the library would look like.
        leaked.emplace_back(ctx.opencl_context(), CL_MEM_READ_WRITE, std::size_t{1} << 20);
        const std::vector<std::uint8_t> ones(std::size_t{1} << 20, 1);
        ctx.queue().enqueueWriteBuffer(leaked.back(), CL_TRUE, 0, ones.size(), ones.data());
        // A GPU's memory is not in this process's RSS (what the check measures): there the leak
        // also keeps the host copy, so the detector itself is tested on every device.
        if (ctx.info().kind != fp4cl::DeviceKind::cpu) leaked_host.push_back(ones);
      }
      ++totals.forwards;
      totals.tokens += T;

      if (check_next || i % o.check_every == 0) {
        if (check_next) ++totals.recoveries;
        check_next = false;
        if (o.inject == "wrong-output" && i > warmup) out[out.size() / 2] ^= 0x4000;  // an exponent bit
        const reference::MoeRouting routing =
            logits ? reference::routing_from_logits(router, T, o.experts, o.top_k, cfg.renormalize)
                   : reference::routing_from_topk(ids, weights, T, o.top_k);
        const reference::MoeReferenceResult ref = reference::moe_reference(ex, ref_options, x, routing);
        ++totals.checks;
        for (std::size_t j = 0; j < out.size(); ++j) {
          if (!reference::accepts_bf16(ref, j, out[j])) {
            totals.fail(
                fmt::format("{}: forward {} ({} tokens, {}): out[{}, {}] = {} (bf16 0x{:04x}), reference {} ± {}", name,
                            i, T, logits ? "router logits" : "top-k ids", j / H, j % H, bf16_to_float(out[j]), out[j],
                            ref.value[j], ref.bound[j]));
            break;
          }
        }
      }
    }
  } catch (const std::exception& e) {
    totals.fail(fmt::format("{}: {}", name, e.what()));
    ++totals.warm;  // do not keep the main thread waiting
  }
}

int run(const Options& o) {
  const Context shared = Context::create();
  const QuantScheme schemes[] = {{WeightFormat::nvfp4, Activations::fp4_dynamic},
                                 {WeightFormat::mxfp4, Activations::bf16},
                                 {WeightFormat::nvfp4, Activations::bf16},
                                 {WeightFormat::mxfp4, Activations::fp4_dynamic}};
  fmt::print(stderr,
             "fp4cl-soak: {} threads on {}, {} s after {} warm-up forwards each; E={} H={} I={} k={}, "
             "1..{} tokens a forward, capacity {}\n",
             o.threads, shared.info().name, o.seconds, 2 * o.max_tokens + o.warmup, o.experts, o.hidden, o.intermediate,
             o.top_k, o.max_tokens, o.capacity);
  Totals totals;
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back(worker, t, std::cref(shared), std::cref(schemes[t % 4]), std::cref(o), std::ref(totals));

  while (totals.warm < o.threads && !totals.failed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t baseline = rss_bytes();
  fault_injection::count_buffers(true);
  const std::int64_t forwards_at_baseline = totals.forwards;
  std::uint64_t peak = baseline;
  const auto start = Clock::now();
  auto last_report = start;
  while (!totals.failed && std::chrono::duration<double>(Clock::now() - start).count() < o.seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak = std::max(peak, rss_bytes());
    if (Clock::now() - last_report > std::chrono::seconds(10)) {
      last_report = Clock::now();
      fmt::print(stderr, "fp4cl-soak: {:.0f} s, {} forwards, {} checks, RSS {:.1f} MiB (+{:.1f})\n",
                 std::chrono::duration<double>(last_report - start).count(), totals.forwards.load(),
                 totals.checks.load(), static_cast<double>(peak) / 1048576.0,
                 (static_cast<double>(peak) - static_cast<double>(baseline)) / 1048576.0);
    }
  }
  totals.stop = true;
  for (auto& t : threads) t.join();
  peak = std::max(peak, rss_bytes());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double growth_mb = (static_cast<double>(peak) - static_cast<double>(baseline)) / 1048576.0;
  // Buffers the library allocated after the warm-up: none may outlive the run (the layers are
  // destroyed by now; give the driver a moment to run the destructor callbacks).
  for (int i = 0; i < 100 && fault_injection::live_buffers() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::int64_t live = fault_injection::live_buffers();

  fmt::print(
      "forwards {} ({} after warm-up, {:.0f}/s), tokens {}, reference checks {}, injected faults {}, "
      "recoveries checked {}\n",
      totals.forwards.load(), totals.forwards - forwards_at_baseline,
      static_cast<double>(totals.forwards - forwards_at_baseline) / seconds, totals.tokens.load(), totals.checks.load(),
      totals.faults.load(), totals.recoveries.load());
  fmt::print(
      "RSS after warm-up {:.1f} MiB, peak {:.1f} MiB, growth {:.1f} MiB (tolerance {:.1f}); library buffers "
      "allocated after warm-up still alive: {}\n",
      static_cast<double>(baseline) / 1048576.0, static_cast<double>(peak) / 1048576.0, growth_mb, o.rss_tolerance_mb,
      live);
  if (!kRssMeaningful)
    fmt::print("RSS growth not checked: built with AddressSanitizer (its quarantine keeps freed memory resident)\n");
  else if (growth_mb > o.rss_tolerance_mb)
    totals.fail(
        fmt::format("memory grew by {:.1f} MiB after warm-up (tolerance {:.1f} MiB)", growth_mb, o.rss_tolerance_mb));
  if (live != 0) totals.fail(fmt::format("{} library buffers allocated after warm-up outlived the run", live));
  if (totals.checks == 0) totals.fail("no output was checked against the reference");
  if (o.expect_faults && totals.faults == 0)
    totals.fail("--expect-faults: no injected fault was seen (FP4CL_FAULT_INJECT unset?)");
  if (o.expect_faults && totals.faults > 0 && totals.recoveries == 0)
    totals.fail("--expect-faults: no forward after a fault was checked");
  for (const std::string& m : totals.messages) fmt::print(stderr, "fp4cl-soak: FAILED: {}\n", m);
  fmt::print("{}\n", totals.failed ? "FAILED" : "PASSED");
  return totals.failed ? 1 : 0;
}

}  // namespace
}  // namespace fp4cl::soak

int main(int argc, char** argv) {
  fp4cl::prefer_pinned_pocl_threads();  // before any OpenCL call
  fp4cl::soak::Options o;
  CLI::App app{
      "fp4cl-soak: MoE forwards on several threads, checked against the scalar reference, with the "
      "resident memory watched"};
  app.add_option("--seconds", o.seconds, "how long to run after the warm-up")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "worker threads, each with its own queue and layer")->check(CLI::Range(1, 64));
  app.add_option("--check-every", o.check_every, "compare with the reference every N forwards of a thread")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", o.warmup,
                 "random forwards per thread before the memory baseline, after one of each token count")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-tokens", o.max_tokens, "token counts are drawn from 1..N")->check(CLI::Range(1, 1 << 20));
  app.add_option("--capacity", o.capacity, "the layers' MoeConfig::max_tokens (larger forwards run in chunks)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--experts", o.experts)->check(CLI::Range(1, 4096));
  app.add_option("--hidden", o.hidden, "a multiple of 64")->check(CLI::Range(64, 1 << 16));
  app.add_option("--inter", o.intermediate, "a multiple of 64")->check(CLI::Range(64, 1 << 16));
  app.add_option("--topk", o.top_k)->check(CLI::Range(1, 64));
  app.add_option("--rss-tolerance-mb", o.rss_tolerance_mb, "allowed growth of the resident set after warm-up")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--expect-faults", o.expect_faults,
               "FP4CL_FAULT_INJECT is set: count failed forwards and check the one after each");
  app.add_option("--inject", o.inject, "self-test: break the run on purpose (it must then fail)")
      ->check(CLI::IsMember({"wrong-output", "leak"}));
  app.add_option("--seed", o.seed);
  CLI11_PARSE(app, argc, argv);
  if (o.top_k > o.experts) {
    fmt::print(stderr, "fp4cl-soak: --topk {} exceeds --experts {}\n", o.top_k, o.experts);
    return 2;
  }
  try {
    return fp4cl::soak::run(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp4cl-soak: {}\n", e.what());
    return 1;
  }
}
