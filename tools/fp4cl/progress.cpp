#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace fp4cl::cli {

namespace {
constexpr int kWidth = 30;
constexpr auto kInterval = std::chrono::milliseconds(100);
}  // namespace

ProgressBar::ProgressBar() : ProgressBar(::isatty(STDERR_FILENO) == 1) {}

ProgressBar::ProgressBar(bool enabled, ProgressUnit unit) : enabled_(enabled), unit_(unit) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::render(std::string_view stage, std::uint64_t done, std::uint64_t total,
                                ProgressUnit unit) {
  const double fraction =
      total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const int filled = static_cast<int>(fraction * kWidth);
  if (unit == ProgressUnit::items)
    return fmt::format("{:<11}[{}{}] {:3}% {:>5}/{}", stage, std::string(static_cast<std::size_t>(filled), '#'),
                       std::string(static_cast<std::size_t>(kWidth - filled), '.'), static_cast<int>(fraction * 100),
                       std::min(done, total), total);
  return fmt::format(
      "{:<11}[{}{}] {:3}% {:8.1f}/{:.1f} MB", stage, std::string(static_cast<std::size_t>(filled), '#'),
      std::string(static_cast<std::size_t>(kWidth - filled), '.'), static_cast<int>(fraction * 100),
      static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6);
}

void ProgressBar::update(std::string_view stage, std::uint64_t done, std::uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool new_stage = stage != stage_;
  if (!new_stage && done < total && drawn_ && now - last_ < kInterval) return;
  if (new_stage && drawn_) fmt::print(stderr, "\n");
  stage_ = std::string(stage);
  last_ = now;
  drawn_ = true;
  fmt::print(stderr, "\r{}", render(stage, done, total, unit_));
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || !drawn_) return;
  fmt::print(stderr, "\n");
  std::fflush(stderr);
  drawn_ = false;
  stage_.clear();
}

ProgressCallback ProgressBar::callback() {
  return [this](const WriteProgress& p) { update(p.stage, p.done, p.total); };
}

}  // namespace fp4cl::cli
