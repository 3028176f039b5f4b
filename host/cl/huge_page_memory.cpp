#include "cl/huge_page_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fp4cl {

namespace {

std::size_t round_up(std::size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

struct Mapping {
  void* p;
  std::size_t bytes;
};

void CL_CALLBACK unmap_on_release(cl_mem, void* user) {
  auto* m = static_cast<Mapping*>(user);
  unmap_huge_page_memory(m->p, m->bytes);
  delete m;
}

// Slabs of kHugePageBytes that buffers below that size share (huge_page_memory.hpp). Never
// destroyed (OpenCL may release buffers while the process exits).
struct Slab {
  unsigned char* base;
  std::size_t used = 0;  // bytes handed out from the start (never reused while the slab lives)
  std::size_t live = 0;  // buffers not yet released
};

struct Slabs {
  std::mutex mutex;
  std::vector<Slab*> open;
};

Slabs& slabs() {
  static Slabs* s = new Slabs;
  return *s;
}

// `bytes` (< kHugePageBytes) from the first open slab with room, or a new one; nullptr where no
// memory could be mapped.
void* slab_allocate(std::size_t bytes, Slab*& from) {
  Slabs& all = slabs();
  const std::lock_guard<std::mutex> lock(all.mutex);
  for (Slab* s : all.open) {
    const std::size_t at = (s->used + kHugePageSlabAlignment - 1) / kHugePageSlabAlignment * kHugePageSlabAlignment;
    if (at + bytes <= kHugePageBytes) {
      s->used = at + bytes;
      ++s->live;
      from = s;
      return s->base + at;
    }
  }
  void* p = map_huge_page_memory(kHugePageBytes);
  if (p == nullptr) return nullptr;
  auto* s = new Slab{static_cast<unsigned char*>(p)};
  s->used = bytes;
  s->live = 1;
  all.open.push_back(s);
  from = s;
  return p;
}

void slab_release(Slab* s) {
  Slabs& all = slabs();
  const std::lock_guard<std::mutex> lock(all.mutex);
  if (--s->live != 0) return;
  all.open.erase(std::find(all.open.begin(), all.open.end(), s));
  unmap_huge_page_memory(s->base, kHugePageBytes);
  delete s;
}

void CL_CALLBACK release_slab_share(cl_mem, void* user) { slab_release(static_cast<Slab*>(user)); }

}  // namespace

bool use_huge_page_buffers(const Context& ctx) {
#if defined(__linux__)
  if (ctx.info().kind != DeviceKind::cpu) return false;
  const char* v = std::getenv("FP4CL_HUGE_PAGES");
  return v == nullptr || std::string(v) != "0";
#else
  (void)ctx;
  return false;
#endif
}

void* map_huge_page_memory(std::size_t bytes) {
#if defined(__linux__)
  if (bytes == 0) return nullptr;
  const std::size_t size = round_up(bytes);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes != 0) {
    // Not aligned: map one huge page more and trim both ends to the aligned span.
    ::munmap(p, size);
    p = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (aligned > start) ::munmap(p, aligned - start);
    const std::uintptr_t end = start + size + kHugePageBytes;
    if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
    p = reinterpret_cast<void*>(aligned);
  }
  // Advice only: where THP is off ("never") the memory stays on 4 KiB pages and works the same.
  ::madvise(p, size, MADV_HUGEPAGE);
  return p;
#else
  (void)bytes;
  return nullptr;
#endif
}

void unmap_huge_page_memory(void* p, std::size_t bytes) {
#if defined(__linux__)
  if (p != nullptr) ::munmap(p, round_up(bytes));
#else
  (void)p;
  (void)bytes;
#endif
}

std::size_t huge_page_backed_bytes(const void* p, std::size_t bytes) {
#if defined(__linux__)
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + bytes;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  std::size_t kib = 0;
  while (std::getline(smaps, line)) {
    std::uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    // A mapping's header line: "start-end perms offset dev inode [path]" in hex.
    if (head >> std::hex >> start >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      inside = start < hi && end > lo;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream value(line.substr(14));
      std::size_t k = 0;
      if (value >> k) kib += k;
    }
  }
  return std::min(bytes, kib * 1024);
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

cl_int create_huge_page_buffer(const cl::Context& context, cl_mem_flags flags, std::size_t bytes, const void* host,
                               cl::Buffer& out) {
  // A slab's share below kHugePageBytes (fresh memory: zeroed, as a mapping of its own is).
  Slab* slab = nullptr;
  void* p = bytes < kHugePageBytes ? slab_allocate(bytes, slab) : map_huge_page_memory(bytes);
  if (p == nullptr) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  const auto give_back = [&] {
    if (slab != nullptr) slab_release(slab);
    else unmap_huge_page_memory(p, bytes);
  };
  if ((flags & CL_MEM_COPY_HOST_PTR) != 0 && host != nullptr) std::memcpy(p, host, bytes);
  flags = (flags & ~static_cast<cl_mem_flags>(CL_MEM_COPY_HOST_PTR)) | CL_MEM_USE_HOST_PTR;
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context, flags, bytes, p, &err);
  if (err != CL_SUCCESS) {
    give_back();
    return err;
  }
  Mapping* mapping = slab != nullptr ? nullptr : new Mapping{p, bytes};
  err = slab != nullptr ? ::clSetMemObjectDestructorCallback(buffer(), release_slab_share, slab)
                        : ::clSetMemObjectDestructorCallback(buffer(), unmap_on_release, mapping);
  if (err != CL_SUCCESS) {
    buffer = cl::Buffer();  // released first: nothing uses the memory after this
    give_back();
    delete mapping;
    return err;
  }
  out = std::move(buffer);
  return CL_SUCCESS;
}

std::size_t huge_page_slabs_mapped() {
  Slabs& all = slabs();
  const std::lock_guard<std::mutex> lock(all.mutex);
  return all.open.size();
}

}  // namespace fp4cl
