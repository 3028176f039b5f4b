// Minimal leveled logging to stderr. FP4CL_LOG=error|warn|info|debug (default warn).
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace fp4cl::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... Args>
void at(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(level)) write(level, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) { at(Level::warn, f, std::forward<Args>(a)...); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) { at(Level::info, f, std::forward<Args>(a)...); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) { at(Level::debug, f, std::forward<Args>(a)...); }

}  // namespace fp4cl::log
