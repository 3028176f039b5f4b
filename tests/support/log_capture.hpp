// Captures fp4cl's log messages (every level) for the lifetime of the object instead of printing
// them, then restores the previous level and sink.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/log.hpp"

namespace fp4cl::test {

class LogCapture {
 public:
  LogCapture() : old_level_(log::level()) {
    old_sink_ = log::set_sink([this](log::Level level, std::string_view message) {
      messages_.emplace_back(level, std::string(message));
    });
    log::set_level(log::Level::debug);
  }
  ~LogCapture() {
    log::set_level(old_level_);
    log::set_sink(std::move(old_sink_));
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The messages of exactly `level`.
  std::vector<std::string> at(log::Level level) const {
    std::vector<std::string> out;
    for (const auto& [l, m] : messages_)
      if (l == level) out.push_back(m);
    return out;
  }
  std::vector<std::string> warnings() const { return at(log::Level::warn); }

 private:
  log::Level old_level_;
  log::Sink old_sink_;
  std::vector<std::pair<log::Level, std::string>> messages_;
};

}  // namespace fp4cl::test
