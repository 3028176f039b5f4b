#include "support/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace fp4cl::log {

namespace {

Level level_from_env() {
  const char* v = std::getenv("FP4CL_LOG");
  if (!v) return Level::warn;
  const std::string s(v);
  if (s == "error") return Level::error;
  if (s == "info") return Level::info;
  if (s == "debug") return Level::debug;
  return Level::warn;
}

std::atomic<int>& threshold() {
  static std::atomic<int> value{static_cast<int>(level_from_env())};
  return value;
}

struct Output {
  std::mutex mutex;
  Sink sink;  // empty: stderr
};
Output& output() {
  static Output out;
  return out;
}

}  // namespace

bool enabled(Level level) { return static_cast<int>(level) <= threshold().load(std::memory_order_relaxed); }

void set_level(Level level) { threshold().store(static_cast<int>(level), std::memory_order_relaxed); }

Level level() { return static_cast<Level>(threshold().load(std::memory_order_relaxed)); }

Sink set_sink(Sink sink) {
  Output& out = output();
  std::lock_guard<std::mutex> lock(out.mutex);
  std::swap(out.sink, sink);
  return sink;
}

void write(Level level, std::string_view message) {
  static const char* const names[] = {"error", "warn", "info", "debug"};
  Output& out = output();
  std::lock_guard<std::mutex> lock(out.mutex);
  if (out.sink) {
    out.sink(level, message);
    return;
  }
  std::fprintf(stderr, "fp4cl %s: %.*s\n", names[static_cast<int>(level)], static_cast<int>(message.size()),
               message.data());
}

}  // namespace fp4cl::log
