// Every OpenCL call of the library that allocates device memory, builds a program or puts a
// command on a queue goes through these thin wrappers (nothing in host/ calls the bindings'
// cl::Buffer constructors, enqueue*() or build() directly). They behave exactly like the
// bindings, and consult the test-only fault injection hook (host/cl/fault_injection.hpp) first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cl/fault_injection.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/opencl.hpp"

namespace fp4cl {

// The largest buffer fp4cl allocates on the context's device: CL_DEVICE_MAX_MEM_ALLOC_SIZE, or
// less while a test pretends so (fault_injection::set_max_alloc_bytes).
std::uint64_t max_alloc_bytes(const Context& ctx);

// A buffer of `bytes` bytes (at least 1) named `what` in errors, e.g. "the MoE workspace buffer
// x1". Throws fp4cl::Error naming it and its size when it exceeds max_alloc_bytes() or the device
// refuses it (out of memory: CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, ...).
cl::Buffer allocate_buffer(const Context& ctx, cl_mem_flags flags, std::size_t bytes, const void* host,
                           const std::string& what);

namespace opencl {

// Each returns the OpenCL status (CL_SUCCESS = 0), like the bindings' member functions.
// `huge_pages`: on memory from cl/huge_page_memory.hpp (CPU devices), else as OpenCL allocates.
cl_int create_buffer(const cl::Context& context, cl_mem_flags flags, std::size_t bytes, void* host, cl::Buffer& out,
                     bool huge_pages = false);
cl_int build_program(const cl::Program& program, const cl::Device& device, const std::string& options);
cl_int enqueue_kernel(const cl::CommandQueue& queue, const cl::Kernel& kernel, const cl::NDRange& global,
                      const cl::NDRange& local, const std::vector<cl::Event>* wait, cl::Event* event);
cl_int enqueue_write(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, std::size_t offset,
                     std::size_t bytes, const void* data, const std::vector<cl::Event>* wait, cl::Event* event);
cl_int enqueue_read(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, std::size_t offset,
                    std::size_t bytes, void* data, const std::vector<cl::Event>* wait, cl::Event* event);
cl_int enqueue_copy(const cl::CommandQueue& queue, const cl::Buffer& src, const cl::Buffer& dst, std::size_t src_offset,
                    std::size_t dst_offset, std::size_t bytes, const std::vector<cl::Event>* wait, cl::Event* event);
cl_int enqueue_fill(const cl::CommandQueue& queue, const cl::Buffer& buffer, const void* pattern,
                    std::size_t pattern_bytes, std::size_t offset, std::size_t bytes,
                    const std::vector<cl::Event>* wait, cl::Event* event);
// Returns the mapped pointer (null on failure, with *status set).
void* enqueue_map(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, cl_map_flags flags,
                  std::size_t offset, std::size_t bytes, const std::vector<cl::Event>* wait, cl::Event* event,
                  cl_int* status);
cl_int enqueue_unmap(const cl::CommandQueue& queue, const cl::Buffer& buffer, void* mapped,
                     const std::vector<cl::Event>* wait, cl::Event* event);
cl_int enqueue_marker(const cl::CommandQueue& queue, const std::vector<cl::Event>* wait, cl::Event* event);

}  // namespace opencl
}  // namespace fp4cl
