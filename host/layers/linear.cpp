#include "fp4cl/linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "cl/caller_buffers.hpp"
#include "cl/opencl_calls.hpp"
#include "kernels/linear_kernel.hpp"
#include "layers/linear_plan.hpp"
#include "prepare/fp4_weight_checks.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

std::size_t output_bytes(OutputType t) { return t == OutputType::bf16 ? 2 : 4; }

cl::Buffer make_buffer(const Context& ctx, cl_mem_flags flags, std::size_t bytes, const void* host, const char* what) {
  return allocate_buffer(ctx, flags, bytes, host, fmt::format("Linear: {}", what));
}

}  // namespace

const char* to_string(OutputType t) { return t == OutputType::bf16 ? "BF16" : "FP32"; }

struct Linear::State {
  explicit State(Context c) : ctx(std::move(c)) {}
  // One step of the plan (layers/linear_plan.hpp) with its prepared kernel; steps with the same
  // strategy and parameters share one kernel object.
  struct Step {
    std::int64_t last_tokens = 0;
    std::shared_ptr<LinearKernel> kernel;
    std::string name, origin;
  };
  Context ctx;
  QuantScheme scheme;
  LinearOptions options;
  LinearConfig config;
  std::vector<Step> steps;
  cl::Buffer workspace, bias;
  // Staging for run() and for calls beyond max_tokens: staging_tokens rows of x and of y,
  // allocated (both or neither) on first use.
  cl::Buffer stage_x, stage_y;
  std::int64_t staging_tokens = 0;
  std::vector<cl::Event> events;  // the commands of the last enqueue
  // The layer's last enqueued command, kept across failed calls (enqueue() returns it; run()'s
  // first write waits for it). Calls share the workspace and the staging buffers; the in-order
  // queue runs them one after the other.
  cl::Event last;

  void allocate_staging() {
    if (stage_x()) return;
    const std::int64_t row =
        std::max<std::int64_t>(config.k * 2, config.n * static_cast<std::int64_t>(output_bytes(config.output)));
    const std::int64_t tokens = std::max<std::int64_t>(
        1, std::min<std::int64_t>(config.max_tokens, static_cast<std::int64_t>(max_alloc_bytes(ctx)) / row));
    // Into locals first: a failed second allocation must not leave a half-made pair behind.
    cl::Buffer x = make_buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(tokens * config.k) * 2, nullptr,
                               "the staging input");
    cl::Buffer y =
        make_buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(tokens * config.n) * output_bytes(config.output),
                    nullptr, "the staging output");
    stage_x = std::move(x);
    stage_y = std::move(y);
    staging_tokens = tokens;
  }

  // Remembers the last command that reached the queue, whether the call succeeded or not.
  void record_last() {
    if (!events.empty()) last = events.back();
  }

  // One call of at most max_tokens tokens on the layer's kernels.
  void enqueue_direct(const cl::Buffer& x, const cl::Buffer& y, std::int64_t m, const std::vector<cl::Event>& after);
  // Linear::run: host arrays through the staging buffers, in chunks.
  template <typename Out>
  void run_on_host(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<Out>& y);

  const Step& step_for(std::int64_t m) const {
    for (const Step& s : steps)
      if (m <= s.last_tokens) return s;
    return steps.back();
  }
};

Linear::Linear(std::unique_ptr<State> state) : state_(std::move(state)) {}
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

Linear Linear::create(const Context& ctx, const Fp4Weight& weight, const QuantScheme& scheme,
                      const LinearOptions& options) {
  check_linear_weight(weight, scheme);
  if (options.max_tokens < 1 || options.max_tokens > std::numeric_limits<std::int32_t>::max())
    fail("LinearOptions::max_tokens = {}: must be in 1 .. 2^31-1", options.max_tokens);
  if (options.decode_max_tokens < 0)
    fail("LinearOptions::decode_max_tokens = {}: must be 0 (default) or positive", options.decode_max_tokens);
  if (!options.bias.empty() && static_cast<std::int64_t>(options.bias.size()) != weight.n)
    fail("LinearOptions::bias has {} values; the layer has n = {} outputs", options.bias.size(), weight.n);

  auto s = std::make_unique<State>(ctx);
  s->scheme = scheme;
  s->options = options;
  LinearConfig& config = s->config;
  config.scheme = scheme;
  config.n = weight.n;
  config.k = weight.k;
  config.max_tokens = options.max_tokens;
  config.has_bias = !options.bias.empty();
  config.output = options.output;
  config.device = ctx.info().kind;

  const LinearPlan plan = plan_linear_layer(ctx, config, options, linear_kernels());
  WeightLayouts layouts;
  std::vector<std::pair<LinearPlanStep, std::shared_ptr<LinearKernel>>> prepared;
  std::size_t workspace = 0;
  for (const LinearPlanStep& step : plan.steps) {
    std::shared_ptr<LinearKernel> kernel;
    for (const auto& [p, k] : prepared)
      if (p.kernel == step.kernel && p.config.tuning == step.config.tuning) kernel = k;
    if (!kernel) {
      kernel = linear_kernels().instantiate(step.kernel);
      kernel->prepare(ctx, step.config, weight, layouts);
      workspace = std::max(workspace, kernel->workspace_bytes());
      prepared.emplace_back(step, kernel);
    }
    s->steps.push_back({step.last_tokens, kernel, step.kernel, step.origin});
  }
  if (workspace > max_alloc_bytes(ctx))
    fail("Linear: max_tokens = {} needs a {} byte workspace; {} allocates at most {} bytes per buffer",
         options.max_tokens, workspace, ctx.info().name, max_alloc_bytes(ctx));
  s->workspace = make_buffer(ctx, CL_MEM_READ_WRITE, workspace, nullptr, "the linear workspace");
  if (config.has_bias)
    s->bias = make_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, options.bias.size() * sizeof(float),
                          options.bias.data(), "the bias");
  Linear layer(std::move(s));
  log::info("{}", layer.describe());
  return layer;
}

cl::Event Linear::enqueue(const cl::Buffer& x, const cl::Buffer& y, std::int64_t m,
                          const std::vector<cl::Event>& wait) {
  State& s = *state_;
  if (m < 0) fail("Linear: m = {} tokens; must be at least 0", m);
  if (m > std::numeric_limits<std::int32_t>::max())
    fail("Linear: m = {} tokens; at most 2^31-1 per call", m);
  const std::size_t x_need = static_cast<std::size_t>(m * s.config.k) * 2;
  const std::size_t y_need = static_cast<std::size_t>(m * s.config.n) * output_bytes(s.config.output);
  const auto x_size = static_cast<std::size_t>(caller_buffer_bytes(s.ctx, x, "Linear", "x"));
  const auto y_size = static_cast<std::size_t>(caller_buffer_bytes(s.ctx, y, "Linear", "y"));
  if (x() == y()) fail("Linear: x and y are the same buffer; the output must not overwrite the input");
  if (x_size < x_need)
    fail("Linear: the x buffer has {} bytes; {} tokens × k = {} BF16 values need {}", x_size, m, s.config.k, x_need);
  if (y_size < y_need)
    fail("Linear: the y buffer has {} bytes; {} tokens × n = {} {} values need {}", y_size, m, s.config.n,
         to_string(s.config.output), y_need);

  // No wait on the layer's previous call: the queue is in order (Context refuses others), and a
  // wait list costs host time a launch on NVIDIA's OpenCL (the MoE layer's measurement,
  // bench/gpu/history.md).
  std::vector<cl::Event> after = wait;
  s.events.clear();
  try {
    if (m <= s.config.max_tokens) {
      s.enqueue_direct(x, y, m, after);
    } else {
      // Beyond the workspace: chunks of the staging capacity, copied through the staging buffers.
      s.allocate_staging();
      const std::size_t x_row = static_cast<std::size_t>(s.config.k) * 2;
      const std::size_t y_row = static_cast<std::size_t>(s.config.n) * output_bytes(s.config.output);
      for (std::int64_t offset = 0; offset < m; offset += s.staging_tokens) {
        const std::int64_t rows = std::min(s.staging_tokens, m - offset);
        cl::Event copied;
        check_cl(
            opencl::enqueue_copy(s.ctx.queue(), x, s.stage_x, static_cast<std::size_t>(offset) * x_row, 0,
                                 static_cast<std::size_t>(rows) * x_row, after.empty() ? nullptr : &after, &copied),
            "Linear: copying tokens {}..{} of x to the staging buffer", offset, offset + rows - 1);
        s.events.push_back(copied);
        s.enqueue_direct(s.stage_x, s.stage_y, rows, {copied});
        const std::vector<cl::Event> computed{s.events.back()};
        cl::Event out;
        check_cl(opencl::enqueue_copy(s.ctx.queue(), s.stage_y, y, 0, static_cast<std::size_t>(offset) * y_row,
                                      static_cast<std::size_t>(rows) * y_row, &computed, &out),
                 "Linear: copying tokens {}..{} of y from the staging buffer", offset, offset + rows - 1);
        s.events.push_back(out);
        after = {out};
      }
    }
  } catch (...) {
    s.record_last();
    throw;
  }
  s.record_last();
  return s.last;
}

void Linear::State::enqueue_direct(const cl::Buffer& x, const cl::Buffer& y, std::int64_t m,
                                   const std::vector<cl::Event>& after) {
  if (m == 0) {
    cl::Event done;
    check_cl(opencl::enqueue_marker(ctx.queue(), &after, &done), "Linear: enqueueing the marker of a 0-token call");
    events.push_back(done);
    return;
  }
  LinearCall call;
  call.x = &x;
  call.y = &y;
  call.bias = &bias;
  call.workspace = &workspace;
  call.m = m;
  call.wait = &after;
  call.events = &events;
  step_for(m).kernel->apply(ctx, call);
}

template <typename Out>
void Linear::State::run_on_host(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t m,
                                std::vector<Out>& y) {
  State& s = *this;
  if (m < 0) fail("Linear::run: m = {} tokens; must be at least 0", m);
  if (static_cast<std::int64_t>(x.size()) != m * layer.k())
    fail("Linear::run: x has {} values; m × k = {} × {} = {} expected", x.size(), m, layer.k(), m * layer.k());
  y.assign(static_cast<std::size_t>(m * layer.n()), Out{});
  if (m == 0) return;
  s.allocate_staging();
  const std::vector<cl::Event> previous = s.last() ? std::vector<cl::Event>{s.last} : std::vector<cl::Event>{};
  // Chunks of the staging capacity (max_tokens unless a buffer of that many would be too large).
  for (std::int64_t offset = 0; offset < m; offset += s.staging_tokens) {
    const std::int64_t rows = std::min(s.staging_tokens, m - offset);
    cl::Event written;
    try {
      check_cl(opencl::enqueue_write(s.ctx.queue(), s.stage_x, false, 0, static_cast<std::size_t>(rows * layer.k()) * 2,
                                     x.data() + offset * layer.k(),
                                     offset == 0 && !previous.empty() ? &previous : nullptr, &written),
               "Linear::run: copying x to the device");
      const std::vector<cl::Event> after{layer.enqueue(s.stage_x, s.stage_y, rows, {written})};
      check_cl(opencl::enqueue_read(s.ctx.queue(), s.stage_y, true, 0,
                                    static_cast<std::size_t>(rows * layer.n()) * sizeof(Out),
                                    y.data() + offset * layer.n(), &after, nullptr),
               "Linear::run: copying y from the device");
    } catch (...) {
      // The write reads the caller's x: it must be over before the error reaches the caller.
      if (written()) written.wait();
      throw;
    }
  }
}

void Linear::run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<std::uint16_t>& y) {
  if (state_->config.output != OutputType::bf16)
    fail("Linear::run: the layer's output type is {}; pass a std::vector<float>", to_string(state_->config.output));
  state_->run_on_host(*this, x, m, y);
}

void Linear::run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<float>& y) {
  if (state_->config.output != OutputType::fp32)
    fail("Linear::run: the layer's output type is {}; pass a std::vector<std::uint16_t>",
         to_string(state_->config.output));
  state_->run_on_host(*this, x, m, y);
}

std::int64_t Linear::n() const { return state_->config.n; }
std::int64_t Linear::k() const { return state_->config.k; }
const QuantScheme& Linear::scheme() const { return state_->scheme; }
const LinearOptions& Linear::options() const { return state_->options; }
const std::vector<cl::Event>& Linear::last_events() const { return state_->events; }

std::uint64_t Linear::weight_bytes() const { return state_->steps.front().kernel->weight_bytes(); }

std::string Linear::kernel_name(std::int64_t m) const { return state_->step_for(m).name; }

std::string Linear::kernel_description(std::int64_t m) const {
  const State::Step& step = state_->step_for(m);
  return fmt::format("{} [{}]", step.kernel->describe(), step.origin);
}

std::string Linear::describe() const {
  const State& s = *state_;
  if (s.steps.size() == 1)
    return fmt::format("{}: {} [{}]", s.config.describe(), s.steps[0].kernel->describe(), s.steps[0].origin);
  std::string steps;
  std::int64_t first = 1;
  for (const State::Step& step : s.steps) {
    steps += fmt::format("{}m {}..{}: {} [{}]", steps.empty() ? "" : "; ", first, step.last_tokens,
                         step.kernel->describe(), step.origin);
    first = step.last_tokens + 1;
  }
  return fmt::format("{}: {}", s.config.describe(), steps);
}

}  // namespace fp4cl
