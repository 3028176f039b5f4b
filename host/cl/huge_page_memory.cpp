#include "cl/huge_page_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

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
  void* p = map_huge_page_memory(bytes);
  if (p == nullptr) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  if ((flags & CL_MEM_COPY_HOST_PTR) != 0 && host != nullptr) std::memcpy(p, host, bytes);
  flags = (flags & ~static_cast<cl_mem_flags>(CL_MEM_COPY_HOST_PTR)) | CL_MEM_USE_HOST_PTR;
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(context, flags, bytes, p, &err);
  if (err != CL_SUCCESS) {
    unmap_huge_page_memory(p, bytes);
    return err;
  }
  auto* mapping = new Mapping{p, bytes};
  err = ::clSetMemObjectDestructorCallback(buffer(), unmap_on_release, mapping);
  if (err != CL_SUCCESS) {
    buffer = cl::Buffer();  // released first: nothing uses the memory after this
    unmap_huge_page_memory(p, bytes);
    delete mapping;
    return err;
  }
  out = std::move(buffer);
  return CL_SUCCESS;
}

}  // namespace fp4cl
