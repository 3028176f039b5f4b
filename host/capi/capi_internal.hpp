// What the C API's entry points share: the structs behind the opaque handles of fp4cl/fp4cl.h,
// the guard that turns every C++ exception into a status and a thread-local message, and the
// argument checks.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/checkpoint.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/fp4cl.h"
#include "fp4cl/linear.hpp"
#include "fp4cl/model_config.hpp"
#include "fp4cl/moe.hpp"

struct fp4cl_context {
  fp4cl::Context ctx;
  std::string description;
};

struct fp4cl_model {
  fp4cl::Context ctx;
  fp4cl::Checkpoint checkpoint;
  fp4cl::ModelConfig config;
};

// A device buffer that grows to the largest host call seen (host-pointer calls reuse it).
struct fp4cl_staging_buffer {
  cl::Buffer buffer;
  std::size_t bytes = 0;
};

struct fp4cl_linear {
  fp4cl::Context ctx;
  fp4cl::Linear layer;
  fp4cl_staging_buffer x, y;
};

struct fp4cl_moe {
  fp4cl::Context ctx;
  fp4cl::MoeLayer layer;
  fp4cl::MoeConfig config;
  std::optional<fp4cl::MoeCall> last_call;  // the latest enqueue, until fp4cl_moe_finish checks it
  fp4cl_staging_buffer x, routing_a, routing_b, out;
};

namespace fp4cl::capi {

// A failure the C layer detects itself, with the status it maps to.
class CapiError {
 public:
  CapiError(fp4cl_status status, std::string message) : status_(status), message_(std::move(message)) {}
  fp4cl_status status() const { return status_; }
  const std::string& message() const { return message_; }

 private:
  fp4cl_status status_;
  std::string message_;
};

template <typename... Args>
[[noreturn]] void raise(fp4cl_status status, fmt::format_string<Args...> format, Args&&... args) {
  throw CapiError(status, fmt::format(format, std::forward<Args>(args)...));
}

void clear_last_error();
void set_last_error(fp4cl_status status, const std::string& message, int cl_status);

// The status of an fp4cl::Error: its OpenCL status when it has one (out-of-memory statuses to
// FP4CL_ERROR_OUT_OF_MEMORY), else `otherwise` (what a failure of this entry point means).
fp4cl_status status_of_error(int cl_status, fp4cl_status otherwise);

// Runs `body` with every exception caught: the entry point's status, its message prefixed with
// `function` ("fp4cl_model_open: ..."), and the thread's last error set.
template <typename Body>
fp4cl_status guarded(const char* function, fp4cl_status otherwise, Body&& body) noexcept {
  try {
    clear_last_error();
    body();
    return FP4CL_SUCCESS;
  } catch (const CapiError& e) {
    set_last_error(e.status(), fmt::format("{}: {}", function, e.message()), 0);
    return e.status();
  } catch (const fp4cl::Error& e) {
    const fp4cl_status s = status_of_error(e.cl_status(), otherwise);
    set_last_error(s, fmt::format("{}: {}", function, e.what()), e.cl_status());
    return s;
  } catch (const std::bad_alloc&) {
    set_last_error(FP4CL_ERROR_OUT_OF_MEMORY, fmt::format("{}: out of host memory", function), 0);
    return FP4CL_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(FP4CL_ERROR_INTERNAL, fmt::format("{}: internal error: {}", function, e.what()), 0);
    return FP4CL_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(FP4CL_ERROR_INTERNAL, fmt::format("{}: internal error: unknown exception", function), 0);
    return FP4CL_ERROR_INTERNAL;
  }
}

// Throws FP4CL_ERROR_INVALID_ARGUMENT naming `what` when `p` is NULL.
template <typename T>
void require(const T* p, const char* what) {
  if (p == nullptr) raise(FP4CL_ERROR_INVALID_ARGUMENT, "{} is NULL", what);
}

// The options every layer takes: max_tokens in 1 .. 2^31-1 and output FP4CL_DTYPE_BF16 or
// FP4CL_DTYPE_FP32; FP4CL_ERROR_INVALID_ARGUMENT naming the field otherwise.
inline void check_capacity_and_output(std::int64_t max_tokens, std::int32_t output) {
  if (max_tokens < 1 || max_tokens > INT32_MAX)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->max_tokens = {}: must be in 1 .. 2^31-1", max_tokens);
  if (output != FP4CL_DTYPE_BF16 && output != FP4CL_DTYPE_FP32)
    raise(FP4CL_ERROR_INVALID_ARGUMENT, "options->output = {}: must be FP4CL_DTYPE_BF16 (0) or FP4CL_DTYPE_FP32 (1)",
          output);
}

// The caller's buffer, retained; FP4CL_ERROR_INVALID_ARGUMENT when it is NULL or belongs to
// another OpenCL context than `ctx`'s.
cl::Buffer wrap_buffer(const fp4cl::Context& ctx, cl_mem mem, const char* what);
// The caller's wait list, retained.
std::vector<cl::Event> wrap_wait_list(cl_uint num_wait, const cl_event* wait_list);
// Hands `event` to the caller (retained for it) when `done` is not NULL; a marker after `wait`
// when `event` is null (nothing was enqueued).
void hand_out_event(const fp4cl::Context& ctx, const cl::Event& event, const std::vector<cl::Event>& wait,
                    cl_event* done);

// Grows `staging` to at least `bytes` (at least 1) and returns it.
const cl::Buffer& staging_for(const fp4cl::Context& ctx, fp4cl_staging_buffer& staging, std::size_t bytes,
                              const char* what);

// Throws fp4cl::Error "<what>: CL_NAME (code)" carrying the status unless it is CL_SUCCESS.
inline void check(cl_int status, const char* what) {
  if (status != CL_SUCCESS)
    throw fp4cl::Error(fmt::format("{}: {} ({})", what, fp4cl::cl_status_name(status), status), status);
}

// bytes needed by `count` elements of `element_bytes`, or an INVALID_ARGUMENT when it overflows.
std::size_t checked_bytes(std::int64_t count, std::size_t element_bytes, const char* what);
// FP4CL_ERROR_INVALID_ARGUMENT unless the host array `what` of `have` bytes holds `need` bytes.
void require_bytes(const char* what, std::size_t have, std::size_t need, const std::string& shape);

// Copies `text` into the caller's `buffer` of `size` bytes, NUL-terminated and cut to size - 1
// bytes (nothing when size is 0; buffer may then be NULL), and its full length into *length
// where length is not NULL. FP4CL_ERROR_INVALID_ARGUMENT for a NULL buffer of size > 0.
void copy_text(const std::string& text, char* buffer, std::size_t size, std::size_t* length);

// Layer `index` of the model (FP4CL_ERROR_NOT_FOUND when out of range), and the index of the
// layer named `name` (a layer's name or an MoE layer's decoder-layer prefix).
const CheckpointLayer& layer_at(const fp4cl_model& model, std::size_t index);
std::size_t find_layer(const fp4cl_model& model, const char* name);

}  // namespace fp4cl::capi
