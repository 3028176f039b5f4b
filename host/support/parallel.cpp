#include "support/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "support/check.hpp"

namespace fp4cl {

int host_threads() {
  if (const char* env = std::getenv("FP4CL_HOST_THREADS"); env && *env) {
    const std::string text = env;
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (end != text.c_str() + text.size() || v < 1 || v > 256)
      fail("FP4CL_HOST_THREADS = '{}': expected a number of threads from 1 to 256", text);
    return static_cast<int>(v);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 16u));
}

void parallel_ranges(std::int64_t n, std::int64_t item_bytes,
                     const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  constexpr std::int64_t kMinRangeBytes = std::int64_t{1} << 20;
  const std::int64_t min_items = std::max<std::int64_t>(1, kMinRangeBytes / std::max<std::int64_t>(1, item_bytes));
  const std::int64_t most = std::max<std::int64_t>(1, n / min_items);
  const auto count = static_cast<int>(std::clamp<std::int64_t>(host_threads(), 1, most));
  if (count == 1) {
    body(0, n);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count));
  const auto run = [&](int r) {
    const std::int64_t begin = n * r / count, end = n * (r + 1) / count;
    try {
      body(begin, end);
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(count - 1));
  try {
    for (int r = 1; r < count; ++r) pool.emplace_back(run, r);
  } catch (...) {  // a thread that could not start: its ranges run here, after the first
    for (std::size_t r = pool.size() + 1; r < static_cast<std::size_t>(count); ++r) run(static_cast<int>(r));
  }
  run(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace fp4cl
