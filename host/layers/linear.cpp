#include "fp4cl/linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "cl/opencl_calls.hpp"
#include "kernels/linear_kernel.hpp"
#include "layers/linear_plan.hpp"
#include "prepare/fp4_weight_checks.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

std::size_t output_bytes(OutputType t) { return t == OutputType::bf16 ? 2 : 4; }

std::size_t buffer_size(const cl::Buffer& b, const char* what) {
  if (!b()) fail("Linear: the {} buffer is null", what);
  std::size_t size = 0;
  check_cl(b.getInfo(CL_MEM_SIZE, &size), "Linear: querying the size of the {} buffer", what);
  return size;
}

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
  cl::Buffer host_x, host_y;  // staging for run(), allocated on its first use
  std::vector<cl::Event> events;

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
    fail("Linear: max_tokens = {} needs a {} byte workspace; {} allocates at most {} bytes per buffer", options.max_tokens,
         workspace, ctx.info().name, max_alloc_bytes(ctx));
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
  if (m > s.config.max_tokens)
    fail("Linear: m = {} tokens exceeds the layer's max_tokens = {} (LinearOptions::max_tokens)", m,
         s.config.max_tokens);
  const std::size_t x_need = static_cast<std::size_t>(m * s.config.k) * 2;
  const std::size_t y_need = static_cast<std::size_t>(m * s.config.n) * output_bytes(s.config.output);
  const std::size_t x_size = buffer_size(x, "x"), y_size = buffer_size(y, "y");
  if (x() == y()) fail("Linear: x and y are the same buffer; the output must not overwrite the input");
  if (x_size < x_need)
    fail("Linear: the x buffer has {} bytes; {} tokens × k = {} BF16 values need {}", x_size, m, s.config.k, x_need);
  if (y_size < y_need)
    fail("Linear: the y buffer has {} bytes; {} tokens × n = {} {} values need {}", y_size, m, s.config.n,
         to_string(s.config.output), y_need);

  // The previous call's last command joins the wait list: calls share the workspace, and a queue
  // the caller brought may be out of order.
  std::vector<cl::Event> after = wait;
  if (!s.events.empty()) after.push_back(s.events.back());
  s.events.clear();
  cl::Event done;
  if (m == 0) {
    check_cl(opencl::enqueue_marker(s.ctx.queue(), &after, &done), "Linear: enqueueing the marker of a 0-token call");
    s.events.push_back(done);
    return done;
  }
  LinearCall call;
  call.x = &x;
  call.y = &y;
  call.bias = &s.bias;
  call.workspace = &s.workspace;
  call.m = m;
  call.wait = &after;
  call.events = &s.events;
  s.step_for(m).kernel->apply(s.ctx, call);
  return s.events.back();
}

namespace {

template <typename Out>
void run_on_host(Linear& layer, const Context& ctx, cl::Buffer& host_x, cl::Buffer& host_y,
                 const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<Out>& y) {
  if (m < 0) fail("Linear::run: m = {} tokens; must be at least 0", m);
  if (static_cast<std::int64_t>(x.size()) != m * layer.k())
    fail("Linear::run: x has {} values; m × k = {} × {} = {} expected", x.size(), m, layer.k(), m * layer.k());
  y.assign(static_cast<std::size_t>(m * layer.n()), Out{});
  if (m == 0) return;
  if (m > layer.options().max_tokens)
    fail("Linear::run: m = {} tokens exceeds the layer's max_tokens = {}", m, layer.options().max_tokens);
  const std::int64_t max_tokens = layer.options().max_tokens;
  if (!host_x()) {
    host_x = make_buffer(ctx, CL_MEM_READ_ONLY, static_cast<std::size_t>(max_tokens * layer.k()) * 2, nullptr,
                         "the staging input");
    host_y = make_buffer(ctx, CL_MEM_WRITE_ONLY, static_cast<std::size_t>(max_tokens * layer.n()) * sizeof(Out),
                         nullptr, "the staging output");
  }
  cl::Event written;
  check_cl(opencl::enqueue_write(ctx.queue(), host_x, false, 0, x.size() * 2, x.data(), nullptr, &written),
           "Linear::run: copying x to the device");
  const cl::Event done = layer.enqueue(host_x, host_y, m, {written});
  const std::vector<cl::Event> after{done};
  check_cl(opencl::enqueue_read(ctx.queue(), host_y, true, 0, y.size() * sizeof(Out), y.data(), &after, nullptr),
           "Linear::run: copying y from the device");
}

}  // namespace

void Linear::run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<std::uint16_t>& y) {
  if (state_->config.output != OutputType::bf16)
    fail("Linear::run: the layer's output type is {}; pass a std::vector<float>", to_string(state_->config.output));
  run_on_host(*this, state_->ctx, state_->host_x, state_->host_y, x, m, y);
}

void Linear::run(const std::vector<std::uint16_t>& x, std::int64_t m, std::vector<float>& y) {
  if (state_->config.output != OutputType::fp32)
    fail("Linear::run: the layer's output type is {}; pass a std::vector<std::uint16_t>",
         to_string(state_->config.output));
  run_on_host(*this, state_->ctx, state_->host_x, state_->host_y, x, m, y);
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
