// Host memory on transparent huge pages, for the buffers of OpenCL CPU devices.
//
// A CPU device's buffers are host memory. PoCL allocates them with the C library (4 KiB pages: the
// kernel's `madvise` THP mode, Debian's default, gives huge pages only to memory that asks for
// them), and on the CI machine (a KVM guest) streaming reads from 4 KiB pages measured 46-54 GB/s
// where the same reads from 2 MiB pages measured 58-61 in adjacent runs (33-34 against 35-36 while
// the machine's memory was in its slow state; bench/README.md).
// So on CPU devices fp4cl allocates buffers of 64 KiB or more itself, 2 MiB-aligned (or shares of
// 2 MiB slabs) and advised MADV_HUGEPAGE, and hands them to OpenCL with CL_MEM_USE_HOST_PTR
// (zero-copy on CPU devices); the memory is unmapped when OpenCL releases the buffer (a slab's,
// when it releases the slab's last buffer). FP4CL_HUGE_PAGES=0 turns this off.
#pragma once

#include <cstddef>

#include "fp4cl/context.hpp"

namespace fp4cl {

// Buffers at least this large get huge pages of their own.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
// Buffers from this size up to kHugePageBytes share huge pages: they are carved, 4 KiB-aligned,
// from 2 MiB slabs of huge-page memory (first fit over the slabs still open; a slab is unmapped
// when its last buffer is released, its space is never reused before that). A small layer's
// tensors (linear 2048x768: 0.79 MB of codes, 0.1 MB of scales; 4096x4096's 1 MiB of scales)
// then stream from huge pages too: linear 2048x768 decode on the CI machine took 26.5-36.3 us
// against 31.1-45.7 us on 4 KiB pages (README, PoCL section). Smaller buffers (routing tables,
// one token's activations) stay as OpenCL allocates them.
inline constexpr std::size_t kHugePageSlabMinBytes = std::size_t{64} << 10;
inline constexpr std::size_t kHugePageSlabAlignment = std::size_t{4} << 10;

// Whether fp4cl places large buffers on huge pages on this device: a CPU device, Linux, and
// FP4CL_HUGE_PAGES not "0".
bool use_huge_page_buffers(const Context& ctx);

// `bytes` of zeroed host memory (rounded up to whole huge pages) whose start is 2 MiB-aligned,
// advised MADV_HUGEPAGE; nullptr where the OS refuses (the caller then allocates as usual).
void* map_huge_page_memory(std::size_t bytes);
void unmap_huge_page_memory(void* p, std::size_t bytes);

// How many bytes of [p, p + bytes) the kernel backs with huge pages now (/proc/self/smaps'
// AnonHugePages of the mappings it overlaps); 0 where that is unknown.
std::size_t huge_page_backed_bytes(const void* p, std::size_t bytes);

// Whether allocate_buffer places a buffer of `bytes` on huge pages (given use_huge_page_buffers):
// its own mapping from kHugePageBytes, a slab's share from kHugePageSlabMinBytes.
inline bool huge_page_buffer_size(std::size_t bytes) { return bytes >= kHugePageSlabMinBytes; }

// A buffer of `flags` (CL_MEM_COPY_HOST_PTR copies `host` in) on zeroed huge-page memory, created
// with CL_MEM_USE_HOST_PTR: from map_huge_page_memory for kHugePageBytes or more (unmapped when
// OpenCL destroys the buffer), else a share of a slab (above). Returns the OpenCL status;
// CL_MEM_OBJECT_ALLOCATION_FAILURE where the memory could not be mapped.
cl_int create_huge_page_buffer(const cl::Context& context, cl_mem_flags flags, std::size_t bytes, const void* host,
                               cl::Buffer& out);

// How many slabs (above) are mapped now (for tests).
std::size_t huge_page_slabs_mapped();

}  // namespace fp4cl
