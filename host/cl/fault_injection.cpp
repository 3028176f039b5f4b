#include "cl/fault_injection.hpp"

#include <cstdlib>
#include <mutex>

#include "fp4cl/error.hpp"
#include "fp4cl/opencl.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl::fault_injection {

namespace detail {
std::atomic<bool> g_armed{false};
}  // namespace detail

namespace {

std::mutex g_mutex;  // guards g_plan against arm() racing with counting threads
Plan g_plan;
std::atomic<std::int64_t> g_calls{0}, g_faults{0};
std::atomic<std::uint64_t> g_max_alloc{0};
std::atomic<bool> g_counting{false};
std::atomic<std::int64_t> g_live{0};

int parse_status(const std::string& text) {
  for (int code = 0; code >= -1001; --code)
    if (cl_status_name(code) == text) return code;
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    fail("FP4CL_FAULT_INJECT: status '{}' is neither a CL_* error name nor a number", text);
  return value;
}

std::int64_t parse_count(const std::string& key, const std::string& text) {
  std::size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < 0)
    fail("FP4CL_FAULT_INJECT: {}='{}' is not a non-negative integer", key, text);
  return value;
}

unsigned parse_calls(const std::string& text) {
  unsigned calls = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('+', pos), text.size());
    const std::string name = text.substr(pos, end - pos);
    if (name == "allocate")
      calls |= allocate;
    else if (name == "build")
      calls |= build;
    else if (name == "enqueue")
      calls |= enqueue;
    else if (name == "all")
      calls |= kAllCalls;
    else
      fail("FP4CL_FAULT_INJECT: calls='{}': '{}' is not allocate, build, enqueue or all", text, name);
    pos = end + 1;
  }
  return calls;
}

}  // namespace

const char* to_string(Call kind) {
  switch (kind) {
    case allocate: return "buffer allocation";
    case build: return "program build";
    case enqueue: return "enqueue";
  }
  return "OpenCL call";
}

void arm(const Plan& plan) {
  if (plan.at < 0 || plan.every < 0) fail("fault injection: at = {} and every = {} must be >= 0", plan.at, plan.every);
  if ((plan.calls & kAllCalls) == 0) fail("fault injection: the plan counts no kind of call");
  if (plan.status >= 0) fail("fault injection: status {} is not an OpenCL error (negative)", plan.status);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plan = plan;
  g_calls = 0;
  g_faults = 0;
  detail::g_armed = true;
}

void disarm() {
  std::lock_guard<std::mutex> lock(g_mutex);
  detail::g_armed = false;
}

std::int64_t calls_counted() { return g_calls.load(); }
std::int64_t faults_injected() { return g_faults.load(); }

int detail::on_call_slow(Call kind) {
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_armed) return 0;
    plan = g_plan;
  }
  if ((plan.calls & kind) == 0) return 0;
  const std::int64_t n = ++g_calls;
  const bool fails =
      plan.at > 0 && (n == plan.at || (plan.every > 0 && n > plan.at && (n - plan.at) % plan.every == 0));
  if (!fails) return 0;
  ++g_faults;
  log::debug("fault injection: {} #{} fails with {}", to_string(kind), n, cl_status_name(plan.status));
  return plan.status;
}

Plan parse_plan(const std::string& spec) {
  Plan plan;
  plan.at = 1;
  std::size_t pos = 0;
  while (pos < spec.size()) {
    const std::size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) fail("FP4CL_FAULT_INJECT: '{}' is not key=value", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "calls")
      plan.calls = parse_calls(value);
    else if (key == "at")
      plan.at = parse_count(key, value);
    else if (key == "every")
      plan.every = parse_count(key, value);
    else if (key == "status")
      plan.status = parse_status(value);
    else
      fail("FP4CL_FAULT_INJECT: unknown key '{}' (keys: calls, at, every, status)", key);
  }
  if (plan.status >= 0) fail("FP4CL_FAULT_INJECT: status {} is not an OpenCL error (negative)", plan.status);
  return plan;
}

void arm_from_env_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* spec = std::getenv("FP4CL_FAULT_INJECT");
    if (!spec || !*spec) return;
    const Plan plan = parse_plan(spec);
    arm(plan);
    log::warn("fault injection armed by FP4CL_FAULT_INJECT=\"{}\": OpenCL calls will fail on purpose", spec);
  });
}

void set_max_alloc_bytes(std::uint64_t bytes) { g_max_alloc = bytes; }
std::uint64_t max_alloc_bytes_override() { return g_max_alloc.load(); }

void count_buffers(bool on) { g_counting = on; }
std::int64_t live_buffers() { return g_live.load(); }

namespace detail {
bool counting_buffers() { return g_counting.load(std::memory_order_relaxed); }
void buffer_created() { ++g_live; }
void buffer_destroyed() { --g_live; }
}  // namespace detail

}  // namespace fp4cl::fault_injection
