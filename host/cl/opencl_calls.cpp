#include "cl/opencl_calls.hpp"

#include <algorithm>

#include "cl/huge_page_memory.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

using fault_injection::on_call;

void CL_CALLBACK buffer_released(cl_mem, void*) { fault_injection::detail::buffer_destroyed(); }

}  // namespace

std::uint64_t max_alloc_bytes(const Context& ctx) {
  const std::uint64_t device = ctx.info().max_alloc_bytes, pretend = fault_injection::max_alloc_bytes_override();
  return pretend > 0 ? std::min(device, pretend) : device;
}

cl::Buffer allocate_buffer(const Context& ctx, cl_mem_flags flags, std::size_t bytes, const void* host,
                           const std::string& what) {
  const std::uint64_t limit = max_alloc_bytes(ctx);
  if (bytes > limit)
    fail("{} needs {} bytes; {} allocates at most {} bytes per buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)", what, bytes,
         ctx.info().name, limit);
  cl::Buffer buffer;
  // CPU devices' buffers of 64 KiB or more on huge pages (cl/huge_page_memory.hpp), others as OpenCL
  // allocates them.
  const bool huge = huge_page_buffer_size(bytes) && (flags & CL_MEM_USE_HOST_PTR) == 0 && use_huge_page_buffers(ctx);
  const cl_int status = opencl::create_buffer(ctx.opencl_context(), flags, std::max<std::size_t>(bytes, 1),
                                              const_cast<void*>(host), buffer, huge);
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES || status == CL_OUT_OF_HOST_MEMORY)
    throw Error(fmt::format("{}: allocating {} bytes on {}: {} ({}): the device's memory ({} bytes in all) is "
                            "exhausted",
                            what, bytes, ctx.info().name, cl_status_name(status), status, ctx.info().global_mem_bytes),
                status);
  check_cl(status, "{}: allocating {} bytes on {}", what, bytes, ctx.info().name);
  return buffer;
}

namespace opencl {

cl_int create_buffer(const cl::Context& context, cl_mem_flags flags, std::size_t bytes, void* host, cl::Buffer& out,
                     bool huge_pages) {
  if (const int injected = on_call(fault_injection::allocate)) return injected;
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer;
  if (huge_pages) err = create_huge_page_buffer(context, flags, bytes, host, buffer);
  // Where the memory could not be mapped, as OpenCL allocates.
  if (!huge_pages || err == CL_MEM_OBJECT_ALLOCATION_FAILURE) buffer = cl::Buffer(context, flags, bytes, host, &err);
  if (err != CL_SUCCESS) return err;
  if (fault_injection::detail::counting_buffers() &&
      ::clSetMemObjectDestructorCallback(buffer(), buffer_released, nullptr) == CL_SUCCESS)
    fault_injection::detail::buffer_created();
  out = std::move(buffer);
  return CL_SUCCESS;
}

cl_int build_program(const cl::Program& program, const cl::Device& device, const std::string& options) {
  if (const int injected = on_call(fault_injection::build)) return injected;
  return program.build({device}, options.c_str());
}

cl_int enqueue_kernel(const cl::CommandQueue& queue, const cl::Kernel& kernel, const cl::NDRange& global,
                      const cl::NDRange& local, const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  return queue.enqueueNDRangeKernel(kernel, cl::NullRange, global, local, wait, event);
}

cl_int enqueue_write(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, std::size_t offset,
                     std::size_t bytes, const void* data, const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  return queue.enqueueWriteBuffer(buffer, blocking ? CL_TRUE : CL_FALSE, offset, bytes, data, wait, event);
}

cl_int enqueue_read(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, std::size_t offset,
                    std::size_t bytes, void* data, const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  return queue.enqueueReadBuffer(buffer, blocking ? CL_TRUE : CL_FALSE, offset, bytes, data, wait, event);
}

cl_int enqueue_copy(const cl::CommandQueue& queue, const cl::Buffer& src, const cl::Buffer& dst, std::size_t src_offset,
                    std::size_t dst_offset, std::size_t bytes, const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  return queue.enqueueCopyBuffer(src, dst, src_offset, dst_offset, bytes, wait, event);
}

cl_int enqueue_fill(const cl::CommandQueue& queue, const cl::Buffer& buffer, const void* pattern,
                    std::size_t pattern_bytes, std::size_t offset, std::size_t bytes,
                    const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  std::vector<cl_event> events;
  if (wait)
    for (const cl::Event& e : *wait) events.push_back(e());
  cl_event out = nullptr;
  const cl_int err = ::clEnqueueFillBuffer(queue(), buffer(), pattern, pattern_bytes, offset, bytes,
                                           static_cast<cl_uint>(events.size()),
                                           events.empty() ? nullptr : events.data(), event ? &out : nullptr);
  if (err == CL_SUCCESS && event) *event = cl::Event(out, /*retainObject=*/false);
  return err;
}

void* enqueue_map(const cl::CommandQueue& queue, const cl::Buffer& buffer, bool blocking, cl_map_flags flags,
                  std::size_t offset, std::size_t bytes, const std::vector<cl::Event>* wait, cl::Event* event,
                  cl_int* status) {
  if (const int injected = on_call(fault_injection::enqueue)) {
    if (status) *status = injected;
    return nullptr;
  }
  return queue.enqueueMapBuffer(buffer, blocking ? CL_TRUE : CL_FALSE, flags, offset, bytes, wait, event, status);
}

cl_int enqueue_unmap(const cl::CommandQueue& queue, const cl::Buffer& buffer, void* mapped,
                     const std::vector<cl::Event>* wait, cl::Event* event) {
  // Not a fault point: an unmap that never happens would leave the mapping for good, which no
  // caller can recover from; the map before it is where faults are injected.
  return queue.enqueueUnmapMemObject(buffer, mapped, wait, event);
}

cl_int enqueue_marker(const cl::CommandQueue& queue, const std::vector<cl::Event>* wait, cl::Event* event) {
  if (const int injected = on_call(fault_injection::enqueue)) return injected;
  return queue.enqueueMarkerWithWaitList(wait, event);
}

}  // namespace opencl
}  // namespace fp4cl
