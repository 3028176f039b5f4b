#include "support/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace fp4cl::log {

namespace {
Level level_from_env() {
  const char* v = std::getenv("FP4CL_LOG");
  if (!v) return Level::warn;
  std::string s(v);
  if (s == "error") return Level::error;
  if (s == "info") return Level::info;
  if (s == "debug") return Level::debug;
  return Level::warn;
}
}  // namespace

bool enabled(Level level) {
  static const Level threshold = level_from_env();
  return static_cast<int>(level) <= static_cast<int>(threshold);
}

void write(Level level, std::string_view message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "fp4cl %s: %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace fp4cl::log
