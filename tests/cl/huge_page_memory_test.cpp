// Large and medium buffers of CPU devices on huge-page host memory (cl/huge_page_memory.hpp): the
// memory's alignment and contents, the buffers allocate_buffer makes with it (own mappings, shares
// of slabs; and without it: small buffers, FP4CL_HUGE_PAGES=0), and the memory given back when
// OpenCL releases a buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cl/huge_page_memory.hpp"
#include "cl/opencl_calls.hpp"
#include "fp4cl/context.hpp"

namespace fp4cl {
namespace {

// Whether any mapping of this process covers address p (/proc/self/maps).
bool is_mapped(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream head(line);
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    if (head >> std::hex >> lo >> dash >> hi && a >= lo && a < hi) return true;
  }
  return false;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

void* host_pointer(const cl::Buffer& b) {
  void* p = nullptr;
  b.getInfo(CL_MEM_HOST_PTR, &p);
  return p;
}

cl_mem_flags flags_of(const cl::Buffer& b) {
  cl_mem_flags f = 0;
  b.getInfo(CL_MEM_FLAGS, &f);
  return f;
}

#if defined(__linux__)

TEST(HugePageMemory, IsAlignedZeroedAndWritable) {
  const std::size_t bytes = 3 * kHugePageBytes + 12345;
  auto* p = static_cast<unsigned char*>(map_huge_page_memory(bytes));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u);
  // Rounded up to whole huge pages: the last one is mapped too.
  EXPECT_TRUE(is_mapped(p + 4 * kHugePageBytes - 1));
  for (std::size_t i = 0; i < bytes; i += 4096) EXPECT_EQ(p[i], 0) << i;
  for (std::size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<unsigned char>(i / 4096);
  EXPECT_LE(huge_page_backed_bytes(p, bytes), bytes);
  unmap_huge_page_memory(p, bytes);
  EXPECT_FALSE(is_mapped(p));
  EXPECT_EQ(map_huge_page_memory(0), nullptr);
}

TEST(HugePageMemory, LargeCpuBuffersAreOnItAndReleaseIt) {
  Context ctx = Context::create();
  if (ctx.info().kind != DeviceKind::cpu) GTEST_SKIP() << "not a CPU device";
  ScopedEnv on("FP4CL_HUGE_PAGES", "1");
  ASSERT_TRUE(use_huge_page_buffers(ctx));
  std::vector<std::uint32_t> data(kHugePageBytes / 4 + 7);
  std::iota(data.begin(), data.end(), 1u);
  const std::size_t bytes = data.size() * 4;
  void* host = nullptr;
  {
    cl::Buffer b = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, data.data(), "test buffer");
    EXPECT_NE(flags_of(b) & CL_MEM_USE_HOST_PTR, 0u);
    EXPECT_EQ(flags_of(b) & CL_MEM_COPY_HOST_PTR, 0u);
    host = host_pointer(b);
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(host) % kHugePageBytes, 0u);
    // The contents copied in, read back through OpenCL.
    std::vector<std::uint32_t> back(data.size());
    ctx.queue().enqueueReadBuffer(b, CL_TRUE, 0, bytes, back.data());
    EXPECT_EQ(back, data);
    EXPECT_TRUE(is_mapped(host));
  }
  ctx.queue().finish();
  EXPECT_FALSE(is_mapped(host)) << "the buffer's memory was not unmapped when OpenCL released it";
}

TEST(HugePageMemory, MediumCpuBuffersShareSlabsAndReleaseThem) {
  Context ctx = Context::create();
  if (ctx.info().kind != DeviceKind::cpu) GTEST_SKIP() << "not a CPU device";
  ScopedEnv on("FP4CL_HUGE_PAGES", "1");
  const std::size_t slabs_before = huge_page_slabs_mapped();
  // 300 KB and 700 KB share a slab; 1.5 MB more does not fit beside them and opens another.
  const std::vector<std::size_t> sizes{300000, 700000, 1500000};
  std::vector<std::vector<std::uint32_t>> data;
  std::vector<void*> hosts;
  {
    std::vector<cl::Buffer> buffers;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      data.emplace_back(sizes[i] / 4);
      std::iota(data.back().begin(), data.back().end(), static_cast<std::uint32_t>(1000 * i));
      buffers.push_back(allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizes[i], data.back().data(),
                                        "test buffer"));
      EXPECT_NE(flags_of(buffers.back()) & CL_MEM_USE_HOST_PTR, 0u);
      hosts.push_back(host_pointer(buffers.back()));
      ASSERT_NE(hosts.back(), nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(hosts.back()) % kHugePageSlabAlignment, 0u);
    }
    const auto slab_of = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) / kHugePageBytes; };
    EXPECT_EQ(slab_of(hosts[0]), slab_of(hosts[1]));
    EXPECT_NE(slab_of(hosts[0]), slab_of(hosts[2]));
    EXPECT_EQ(huge_page_slabs_mapped(), slabs_before + 2);
    // Each buffer's contents copied in and read back through OpenCL; a write to one leaves its
    // neighbour in the slab as it was.
    const std::vector<std::uint32_t> ones(sizes[0] / 4, 1u);
    ctx.queue().enqueueWriteBuffer(buffers[0], CL_TRUE, 0, sizes[0], ones.data());
    data[0] = ones;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::uint32_t> back(sizes[i] / 4);
      ctx.queue().enqueueReadBuffer(buffers[i], CL_TRUE, 0, sizes[i], back.data());
      EXPECT_EQ(back, data[i]) << i;
    }
    buffers.erase(buffers.begin());  // the shared slab stays while its other buffer lives
    ctx.queue().finish();
    EXPECT_TRUE(is_mapped(hosts[0]));
    EXPECT_EQ(huge_page_slabs_mapped(), slabs_before + 2);
  }
  ctx.queue().finish();
  EXPECT_EQ(huge_page_slabs_mapped(), slabs_before) << "a slab was not unmapped when its last buffer was released";
  for (void* h : hosts) EXPECT_FALSE(is_mapped(h));
}

TEST(HugePageMemory, SmallBuffersAndTheSwitchKeepOpenClsAllocation) {
  Context ctx = Context::create();
  {
    ScopedEnv on("FP4CL_HUGE_PAGES", "1");
    cl::Buffer small = allocate_buffer(ctx, CL_MEM_READ_WRITE, kHugePageSlabMinBytes - 4, nullptr, "small");
    EXPECT_EQ(flags_of(small) & CL_MEM_USE_HOST_PTR, 0u);
  }
  ScopedEnv off("FP4CL_HUGE_PAGES", "0");
  EXPECT_FALSE(use_huge_page_buffers(ctx));
  cl::Buffer large = allocate_buffer(ctx, CL_MEM_READ_WRITE, 2 * kHugePageBytes, nullptr, "large");
  EXPECT_EQ(flags_of(large) & CL_MEM_USE_HOST_PTR, 0u);
}

#endif

}  // namespace
}  // namespace fp4cl
