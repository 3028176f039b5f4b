// Minimal leveled logging, to stderr by default. FP4CL_LOG=error|warn|info|debug (default warn).
// Library code prints only through here; an application (or a test) can lower or raise the level
// and redirect the messages with set_level() and set_sink().
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string_view>
#include <utility>

namespace fp4cl::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

bool enabled(Level level);
void write(Level level, std::string_view message);

// Overrides the level FP4CL_LOG chose (messages above it are dropped before formatting).
void set_level(Level level);
Level level();

// Where messages go. An empty Sink means stderr ("fp4cl <level>: <message>"). Sinks are called
// one message at a time (serialized) and must not log themselves. Returns the previous sink.
using Sink = std::function<void(Level, std::string_view)>;
Sink set_sink(Sink sink);

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
