// Limits: token counts beyond the workspace (processed in chunks), tensors beyond the device's
// largest allocation (split where the layer can, else a clear error naming the tensor and the
// sizes), device memory exhausted (a clear error), absurd capacities (refused before allocating).
// A small CL_DEVICE_MAX_MEM_ALLOC_SIZE is pretended with fault_injection::set_max_alloc_bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cl/fault_injection.hpp"
#include "fault_support.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "linear/linear_check.hpp"
#include "linear/linear_test_data.hpp"
#include "moe/moe_test_support.hpp"

namespace fp4cl::test {
namespace {

const QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
const QuantScheme kNvW4A16{WeightFormat::nvfp4, Activations::bf16};
const QuantScheme kMxW4A4{WeightFormat::mxfp4, Activations::fp4_dynamic};
const QuantScheme kMxW4A16{WeightFormat::mxfp4, Activations::bf16};

// Pretends the device allocates at most `bytes` per buffer for the scope.
class PretendMaxAlloc {
 public:
  explicit PretendMaxAlloc(std::uint64_t bytes) { fault_injection::set_max_alloc_bytes(bytes); }
  ~PretendMaxAlloc() { fault_injection::set_max_alloc_bytes(0); }
};

// The rows [first, first + count) of a row-major matrix with `cols` columns.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& v, std::int64_t first, std::int64_t count, std::int64_t cols) {
  return {v.begin() + first * cols, v.begin() + (first + count) * cols};
}

// ---------------------------------------------------------------- tokens beyond the workspace

// run() and enqueue() with more tokens than max_tokens: chunks of max_tokens, each the bits a call
// of that chunk alone gives, and all within the scalar reference's bound.
TEST(LinearLimits, TokensBeyondMaxTokensAreProcessedInChunks) {
  const Context& ctx = test_context();
  const std::int64_t m = 11, n = 48, k = 256, cap = 4;
  for (const QuantScheme& scheme : {kNvW4A4, kNvW4A16, kMxW4A4, kMxW4A16}) {
    SCOPED_TRACE(scheme.name());
    const Fp4Weight w = random_weight(scheme.weight, n, k, 51);
    const std::vector<std::uint16_t> x = random_activations(m, k, 52);
    LinearOptions o;
    o.max_tokens = cap;
    o.output = OutputType::fp32;
    Linear layer = Linear::create(ctx, w, scheme, o);
    std::vector<float> y;
    layer.run(x, m, y);
    ASSERT_EQ(y.size(), static_cast<std::size_t>(m * n));
    check_against_reference(scheme, w, x, m, {}, as_doubles(y), false, "chunked run " + scheme.name());
    for (std::int64_t first = 0; first < m; first += cap) {
      const std::int64_t rows = std::min(cap, m - first);
      std::vector<float> part;
      layer.run(rows_of(x, first, rows, k), rows, part);
      EXPECT_EQ(part, rows_of(y, first, rows, n)) << "chunk at token " << first;
    }
    // enqueue() on device buffers.
    cl_int err = CL_SUCCESS;
    const cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                        const_cast<std::uint16_t*>(x.data()), &err);
    const cl::Buffer yb(ctx.opencl_context(), CL_MEM_READ_WRITE, y.size() * 4, nullptr, &err);
    const std::vector<cl::Event> done{layer.enqueue(xb, yb, m)};
    std::vector<float> from_device(y.size());
    ASSERT_EQ(ctx.queue().enqueueReadBuffer(yb, CL_TRUE, 0, y.size() * 4, from_device.data(), &done), CL_SUCCESS);
    EXPECT_EQ(from_device, y);
  }
}

// The staging buffers of run() obey the largest allocation too: fewer tokens per chunk.
TEST(LinearLimits, StagingBeyondTheLargestAllocationRunsSmallerChunks) {
  const Context& ctx = test_context();
  const std::int64_t m = 9, n = 64, k = 256;
  const Fp4Weight w = random_weight(WeightFormat::nvfp4, n, k, 53);
  const std::vector<std::uint16_t> x = random_activations(m, k, 54);
  LinearOptions o;
  o.max_tokens = 16;
  o.kernel = "gemv_rows";
  std::vector<std::uint16_t> whole, limited;
  Linear::create(ctx, w, kNvW4A16, o).run(x, m, whole);
  Linear layer = Linear::create(ctx, w, kNvW4A16, o);
  {
    // 2 tokens of x (2 × 256 × 2 bytes) per staging buffer (allocated by the first run).
    PretendMaxAlloc limit(1024);
    layer.run(x, m, limited);
  }
  EXPECT_EQ(limited, whole);
  check_against_reference(kNvW4A16, w, x, m, {}, as_doubles(limited), true, "small staging");
}

TEST(MoeLimits, AWorkspaceBeyondTheLargestAllocationRunsMoreChunks) {
  const Context& ctx = test_context();
  const std::int64_t T = 70, E = 8, H = 64, I = 64;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, H, I, Data::exact, 61});
  const auto x = make_activations(T, H, Data::exact, 62);
  const auto ids = make_ids(T, 2, E, 63);
  const auto weights = make_weights(T, 2, 64);
  for (const std::string& kernel : moe_kernel_strategies()) {
    MoeConfig cfg;
    cfg.scheme = kNvW4A4;
    cfg.top_k = 2;
    cfg.kernel = kernel;
    MoeLayer whole = MoeLayer::create(ctx, ex, cfg);
    const DeviceResult one = run_topk(whole, cfg.output, x, ids, weights, T);
    // The largest expert tensor is 32 KiB (gate and up together in the split layout); x1 needs
    // 4 × H bytes per pair: 64 tokens of k = 2 fit, not the default 256.
    std::int64_t capacity = 0;
    DeviceResult chunked;
    {
      PretendMaxAlloc limit(32 * 1024);
      MoeLayer small = MoeLayer::create(ctx, ex, cfg);
      capacity = small.max_tokens();
      chunked = run_topk(small, cfg.output, x, ids, weights, T);
    }
    EXPECT_EQ(capacity, 32 * 1024 / (4 * H) / 2) << kernel;
    EXPECT_EQ(chunked.call.chunk_strategies.size(), static_cast<std::size_t>((T + capacity - 1) / capacity)) << kernel;
    EXPECT_EQ(chunked.bf16, one.bf16) << kernel;
  }
}

// ---------------------------------------------------------------- tensors beyond the largest allocation

TEST(MoeLimits, AnExpertTensorBeyondTheLargestAllocationIsRefusedByName) {
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 64, 64, Data::exact, 71});
  MoeConfig cfg;
  cfg.scheme = kNvW4A16;
  cfg.top_k = 2;
  BufferCount buffers(test_context());
  Thrown t;
  {
    PretendMaxAlloc limit(4096);
    t = thrown_by([&] { MoeLayer::create(test_context(), ex, cfg); });
  }
  ASSERT_TRUE(t.threw);
  // The first layout uploaded: the split layout's gate rows, or on GPUs with tensor cores (no
  // split there) the MMA layout's.
  EXPECT_TRUE(t.message.find("MoE: w13 (gate rows) codes needs 16384 bytes") != std::string::npos ||
              t.message.find("MoE: w13 gate rows (MMA layout) needs 16384 bytes") != std::string::npos)
      << t.message;
  EXPECT_NE(t.message.find("at most 4096 bytes per buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"), std::string::npos)
      << t.message;
  EXPECT_EQ(buffers.live(), 0);
}

TEST(LinearLimits, AWeightBeyondTheLargestAllocationIsRefusedByName) {
  const Fp4Weight w = random_weight(WeightFormat::mxfp4, 64, 256, 72);
  LinearOptions o;
  o.kernel = "gemv_rows";
  BufferCount buffers(test_context());
  Thrown t;
  {
    PretendMaxAlloc limit(4096);
    t = thrown_by([&] { Linear::create(test_context(), w, kMxW4A16, o); });
  }
  ASSERT_TRUE(t.threw);
  EXPECT_NE(t.message.find("FP4 weight [64, 256] codes needs"), std::string::npos) << t.message;
  EXPECT_NE(t.message.find("at most 4096 bytes per buffer"), std::string::npos) << t.message;
  EXPECT_EQ(buffers.live(), 0);
}

// ---------------------------------------------------------------- device memory exhausted

TEST(MemoryExhausted, AllocationFailuresAreClearErrors) {
  const Context& ctx = test_context();
  for (int status : {CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY}) {
    fault_injection::Plan p;
    p.calls = fault_injection::allocate;
    p.at = 1;
    p.every = 1;  // every allocation fails: the device is full
    p.status = status;
    BufferCount buffers(ctx);
    Thrown linear, moe;
    {
      fault_injection::Scope full(p);
      linear = thrown_by([&] { Linear::create(ctx, random_weight(WeightFormat::nvfp4, 64, 256, 81), kNvW4A4); });
      MoeConfig cfg;
      cfg.scheme = kMxW4A4;
      cfg.top_k = 2;
      moe = thrown_by([&] {
        MoeLayer::create(ctx, make_experts({WeightFormat::mxfp4, 8, 64, 64, Data::exact, 82}), cfg);
      });
    }
    for (const Thrown* t : {&linear, &moe}) {
      EXPECT_TRUE(is_clear_fault_error(*t, status));
      EXPECT_NE(t->message.find("memory"), std::string::npos) << t->message;
      EXPECT_NE(t->message.find("exhausted"), std::string::npos) << t->message;
    }
    EXPECT_NE(linear.message.find("FP4 weight [64, 256]"), std::string::npos) << linear.message;
    // The first upload: gate rows of the grouped/split layout, or of the MMA layout on GPUs with
    // tensor cores.
    EXPECT_NE(moe.message.find("MoE: w13 "), std::string::npos) << moe.message;
    EXPECT_NE(moe.message.find("gate rows"), std::string::npos) << moe.message;
    EXPECT_EQ(buffers.live(), 0);
  }
}

// Out of resources at launch time (where drivers often report memory they could not commit).
TEST(MemoryExhausted, LaunchFailuresAreClearErrorsAndTheLayerRecovers) {
  const Context& ctx = test_context();
  const std::int64_t T = 5, E = 8;
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, E, 64, 64, Data::exact, 83});
  const auto x = make_activations(T, 64, Data::exact, 84);
  const auto ids = make_ids(T, 2, E, 85);
  const auto weights = make_weights(T, 2, 86);
  MoeConfig cfg;
  cfg.scheme = kNvW4A4;
  cfg.top_k = 2;
  MoeLayer layer = MoeLayer::create(ctx, ex, cfg);
  const DeviceResult clean = run_topk(layer, cfg.output, x, ids, weights, T);
  fault_injection::Plan p;
  p.calls = fault_injection::enqueue;
  p.at = 2;  // the first kernel launch, after the status reset
  p.status = CL_OUT_OF_RESOURCES;
  Thrown t;
  {
    fault_injection::Scope scope(p);
    t = thrown_by([&] { run_topk(layer, cfg.output, x, ids, weights, T); });
  }
  EXPECT_TRUE(is_clear_fault_error(t, CL_OUT_OF_RESOURCES));
  // The first kernel of the strategy the device runs: moe_sort (grouped, decode, mma; mma's FC1
  // for one token), moe_split_fc1 (split).
  EXPECT_NE(t.message.find("enqueueing the MoE kernel moe_"), std::string::npos) << t.message;
  // With the launch's sizes and what the device and the kernel report, to tell a work-group too
  // large from a device out of memory.
  EXPECT_NE(t.message.find(" work-items in work-groups of "), std::string::npos) << t.message;
  EXPECT_NE(t.message.find("the device allows work-groups of at most " +
                           std::to_string(ctx.info().max_work_group_size) + " work-items"),
            std::string::npos)
      << t.message;
  EXPECT_NE(t.message.find("reports CL_KERNEL_WORK_GROUP_SIZE "), std::string::npos) << t.message;
  EXPECT_EQ(run_topk(layer, cfg.output, x, ids, weights, T).bf16, clean.bf16);
}

// ---------------------------------------------------------------- absurd capacities

TEST(AbsurdCapacity, IsRefusedBeforeAnyHugeAllocation) {
  const Context& ctx = test_context();
  const Fp4Experts ex = make_experts({WeightFormat::nvfp4, 8, 64, 64, Data::exact, 91});
  MoeConfig cfg;
  cfg.scheme = kNvW4A16;
  cfg.top_k = 2;
  BufferCount buffers(ctx);
  cfg.max_tokens = std::int64_t{1} << 40;
  const Thrown pairs = thrown_by([&] { MoeLayer::create(ctx, ex, cfg); });
  EXPECT_NE(pairs.message.find("max_tokens = 1099511627776 × top_k = 2 exceeds the kernels' 2^31 pair limit"),
            std::string::npos)
      << pairs.message;
  // 2^29 tokens fit the pair limit; the workspace (lowered to the largest allocation) still
  // wants more than half of the device's memory: refused, naming the sizes, before allocating it.
  fault_injection::Plan count;
  count.calls = fault_injection::allocate;
  std::int64_t normal = 0;  // a layer's allocations with a small workspace: weights and workspace
  {
    MoeConfig small = cfg;
    small.max_tokens = 16;
    fault_injection::Scope counting(count);
    MoeLayer::create(ctx, ex, small);
    normal = fault_injection::calls_counted();
  }
  cfg.max_tokens = std::int64_t{1} << 29;
  Thrown memory;
  std::int64_t allocations = 0;
  {
    fault_injection::Scope counting(count);
    memory = thrown_by([&] { MoeLayer::create(ctx, ex, cfg); });
    allocations = fault_injection::calls_counted();
  }
  EXPECT_NE(memory.message.find("MoE: max_tokens = 536870912 needs a workspace of"), std::string::npos)
      << memory.message;
  EXPECT_NE(memory.message.find("bytes of memory in all"), std::string::npos) << memory.message;
  // The weights only (6 tensors a layout, 5 vectors): none of the workspace's 10 or more buffers.
  EXPECT_LE(allocations, normal - 10);
  EXPECT_EQ(buffers.live(), 0);

  LinearOptions o;
  o.max_tokens = std::int64_t{1} << 40;
  const Thrown linear =
      thrown_by([&] { Linear::create(ctx, random_weight(WeightFormat::nvfp4, 64, 256, 92), kNvW4A16, o); });
  EXPECT_NE(linear.message.find("max_tokens = 1099511627776: must be in 1 .. 2^31-1"), std::string::npos)
      << linear.message;
}

}  // namespace
}  // namespace fp4cl::test
