// The thread-safety contract (README "Thread safety"): one Context shared by several threads,
// each thread with its own queue (Context::with_new_queue) and its own layers on it — a MoE layer
// sharing the prepared weights of another (MoeLayer::with_context), or a layer of its own — gives,
// on every call, the bits a single-threaded run gives. The program cache serves concurrent
// creations, building each program once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/program_cache.hpp"
#include "linear/linear_test_data.hpp"
#include "moe/moe_test_support.hpp"
#include "support/scoped_env.hpp"

namespace fp4cl::test {
namespace {

constexpr int kThreads = 4;

int iterations_per_thread() {
  if (const char* v = std::getenv("FP4CL_THREADS_ITERATIONS"); v && *v) return std::max(1, std::atoi(v));
  return 12;
}

// One MoE call's inputs and its single-threaded output.
struct MoeCase {
  std::int64_t tokens = 0;
  std::vector<std::uint16_t> x;
  std::vector<std::int32_t> ids;
  std::vector<float> weights, logits;
  std::vector<float> expected;
};

template <typename T>
cl::Buffer upload(const Context& ctx, const std::vector<T>& v) {
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(4, v.size() * sizeof(T)));
  if (!v.empty()) ctx.queue().enqueueWriteBuffer(b, CL_TRUE, 0, v.size() * sizeof(T), v.data());
  return b;
}

// Runs one case on `layer`, whose queue is ctx's, with buffers of the calling thread.
std::vector<float> run_case(const Context& ctx, MoeLayer& layer, const MoeCase& c) {
  const auto n = static_cast<std::size_t>(c.tokens * layer.hidden());
  const cl::Buffer x = upload(ctx, c.x);
  const cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(4, n * 4));
  if (c.logits.empty()) {
    layer.forward_topk(x, upload(ctx, c.ids), upload(ctx, c.weights), out, c.tokens);
  } else {
    layer.forward_logits(x, upload(ctx, c.logits), out, c.tokens);
  }
  std::vector<float> y(n);
  if (n) ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 4, y.data());
  return y;
}

std::vector<MoeCase> moe_cases(std::int64_t E, int k) {
  std::vector<MoeCase> cases;
  const std::int64_t token_counts[] = {1, 3, 8, 17, 40, 5};
  for (std::size_t i = 0; i < std::size(token_counts); ++i) {
    MoeCase c;
    c.tokens = token_counts[i];
    const std::uint64_t seed = 1000 + i * 10;
    c.x = make_activations(c.tokens, 64, Data::generic, seed);
    if (i % 2) {
      c.logits = make_logits(c.tokens, E, seed + 1);
    } else {
      c.ids = make_ids(c.tokens, k, E, seed + 2);
      c.weights = make_weights(c.tokens, k, seed + 3);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// Collects the first failure of any thread.
struct Failures {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::atomic<int> calls{0};
  void add(std::string m) {
    std::lock_guard<std::mutex> lock(mutex);
    if (messages.size() < 10) messages.push_back(std::move(m));
  }
};

// Runs body(t, mine) on kThreads threads t, each with its own queue on ctx (`mine`), and reports
// what any of them recorded in `failures` or threw.
template <typename Body>
void run_on_threads(const Context& ctx, Failures& failures, Body body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        body(t, ctx.with_new_queue());
      } catch (const std::exception& e) {
        failures.add("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& m : failures.messages) ADD_FAILURE() << m;
}

TEST(Threads, MoeLayersOnTheirOwnQueuesSharingWeightsAreBitIdentical) {
  const Context& ctx = test_context();
  const std::int64_t E = 16;
  const int k = 4;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 96, Data::generic, 901});
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::fp4_dynamic};
  cfg.top_k = k;
  cfg.output = MoeOutput::fp32;
  cfg.max_tokens = 16;  // the larger cases run in chunks
  MoeLayer base = MoeLayer::create(ctx, ex, cfg);
  std::vector<MoeCase> cases = moe_cases(E, k);
  for (auto& c : cases) {
    c.expected = run_case(ctx, base, c);
    ASSERT_NE(std::count(c.expected.begin(), c.expected.end(), 0.0f), static_cast<std::ptrdiff_t>(c.expected.size()));
  }

  const int iterations = iterations_per_thread();
  Failures failures;
  run_on_threads(ctx, failures, [&](int t, const Context& mine) {
    // Half the threads share the base layer's weights, half create their own layer.
    MoeLayer layer = t % 2 ? MoeLayer::create(mine, ex, cfg) : base.with_context(mine);
    for (int i = 0; i < iterations; ++i) {
      const MoeCase& c = cases[static_cast<std::size_t>(t + i) % cases.size()];
      const std::vector<float> y = run_case(mine, layer, c);
      failures.calls++;
      if (y.size() != c.expected.size() || std::memcmp(y.data(), c.expected.data(), y.size() * 4) != 0)
        failures.add("thread " + std::to_string(t) + " iteration " + std::to_string(i) +
                     " (T = " + std::to_string(c.tokens) + "): the output differs from the single-threaded run");
    }
  });
  EXPECT_EQ(failures.calls.load(), kThreads * iterations);
  // The base layer still gives its bits after the threads used its weights.
  EXPECT_EQ(run_case(ctx, base, cases[0]), cases[0].expected);
}

TEST(Threads, WithContextOfAnotherOpenCLContextIsAClearError) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 4, 64, 64, Data::exact, 930});
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::nvfp4, Activations::bf16};
  cfg.top_k = 2;
  const MoeLayer layer = MoeLayer::create(test_context(), ex, cfg);
  const Context other = Context::create();  // the same device, another cl_context
  try {
    layer.with_context(other);
    FAIL() << "with_context accepted a context whose buffers cannot hold the layer's weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MoeLayer::with_context: the context is on another OpenCL context"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(layer.with_context(test_context().with_new_queue()));
}

TEST(Threads, LinearLayersOnTheirOwnQueuesAreBitIdentical) {
  const Context& ctx = test_context();
  const Fp4Weight weight = random_weight(WeightFormat::nvfp4, 96, 128, 77);
  const QuantScheme scheme{WeightFormat::nvfp4, Activations::fp4_dynamic};
  LinearOptions options;
  options.max_tokens = 32;
  options.output = OutputType::fp32;
  const std::int64_t token_counts[] = {1, 4, 32, 7};
  std::vector<std::vector<std::uint16_t>> xs;
  std::vector<std::vector<float>> expected;
  {
    Linear single = Linear::create(ctx, weight, scheme, options);
    for (std::size_t i = 0; i < std::size(token_counts); ++i) {
      xs.push_back(random_activations(token_counts[i], 128, static_cast<std::uint32_t>(50 + i)));
      expected.emplace_back();
      single.run(xs.back(), token_counts[i], expected.back());
      ASSERT_NE(std::count(expected.back().begin(), expected.back().end(), 0.0f),
                static_cast<std::ptrdiff_t>(expected.back().size()));
    }
  }
  const int iterations = iterations_per_thread();
  Failures failures;
  run_on_threads(ctx, failures, [&](int t, const Context& mine) {
    Linear layer = Linear::create(mine, weight, scheme, options);
    for (int i = 0; i < iterations; ++i) {
      const std::size_t c = static_cast<std::size_t>(t + i) % xs.size();
      std::vector<float> y;
      layer.run(xs[c], token_counts[c], y);
      failures.calls++;
      if (y != expected[c])
        failures.add("thread " + std::to_string(t) + " iteration " + std::to_string(i) +
                     ": the linear output differs from the single-threaded run");
    }
  });
  EXPECT_EQ(failures.calls.load(), kThreads * iterations);
}

// Layers created at the same time on one fresh context (its own program cache, no disk cache)
// ask for the same programs at the same time: each is built once, the others wait for it.
TEST(Threads, ConcurrentCreationBuildsEachProgramOnce) {
  const Fp4Experts ex = make_experts({WeightFormat::mxfp4, 8, 64, 64, Data::exact, 950});
  MoeConfig cfg;
  cfg.scheme = {WeightFormat::mxfp4, Activations::bf16};
  cfg.top_k = 2;
  const auto x = make_activations(9, 64, Data::exact, 951);
  const auto ids = make_ids(9, 2, 8, 952);
  const auto w = make_weights(9, 2, 953);

  ProgramCacheStats single;
  {
    const ScopedEnv no_disk_cache("FP4CL_CACHE_DIR", "off");
    // First a layer on a context of its own: the once-a-process probes (the AVX-512 BF16 probe
    // program, on CPUs that have them) are built there, not in the contexts compared below.
    MoeLayer::create(Context::create(), ex, cfg);
    const Context one = Context::create();
    const Context many = Context::create();
    MoeLayer::create(one, ex, cfg);
    single = one.programs().stats();
    ASSERT_GT(single.source_builds, 0u);

    Failures failures;
    std::vector<std::vector<std::uint16_t>> outs(kThreads);
    run_on_threads(many, failures, [&](int t, const Context& mine) {
      MoeLayer layer = MoeLayer::create(mine, ex, cfg);
      const auto n = static_cast<std::size_t>(9 * 64);
      const cl::Buffer out(mine.opencl_context(), CL_MEM_READ_WRITE, n * 2);
      layer.forward_topk(upload(mine, x), upload(mine, ids), upload(mine, w), out, 9);
      outs[static_cast<std::size_t>(t)].resize(n);
      mine.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 2, outs[static_cast<std::size_t>(t)].data());
    });
    const ProgramCacheStats stats = many.programs().stats();
    EXPECT_EQ(stats.source_builds, single.source_builds);
    // Every thread asks for every program: one build each, the other requests served from memory.
    EXPECT_EQ(stats.memory_hits, kThreads * single.memory_hits + (kThreads - 1) * single.source_builds);
    EXPECT_EQ(stats.disk_hits, 0u);
    for (int t = 1; t < kThreads; ++t) EXPECT_EQ(outs[static_cast<std::size_t>(t)], outs[0]) << "thread " << t;
  }
}

}  // namespace
}  // namespace fp4cl::test
