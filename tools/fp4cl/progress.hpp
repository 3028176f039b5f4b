// A one-line progress bar on stderr for long CLI work, redrawn in place and at most every 100 ms
// (or when the stage changes or the work completes). It stays silent when stderr is not a
// terminal, so logs and pipes get no control characters.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "fp4cl/model_writer.hpp"

namespace fp4cl::cli {

// What the counts of a bar are: bytes (shown as MB) or items (shown as "3/12").
enum class ProgressUnit { bytes, items };

class ProgressBar {
 public:
  // Draws only when `enabled`; by default when stderr is a terminal.
  ProgressBar();
  explicit ProgressBar(bool enabled, ProgressUnit unit = ProgressUnit::bytes);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` of `total` units of `stage`; bytes are shown as MB.
  void update(std::string_view stage, std::uint64_t done, std::uint64_t total);
  // Ends the bar's line (if one was drawn).
  void finish();

  // A library progress callback that updates this bar.
  ProgressCallback callback();

  // The bar's text for a state, e.g. "quantizing [#######.............] 35%  12.0/34.3 MB".
  static std::string render(std::string_view stage, std::uint64_t done, std::uint64_t total,
                            ProgressUnit unit = ProgressUnit::bytes);

 private:
  bool enabled_;
  ProgressUnit unit_;
  bool drawn_ = false;
  std::string stage_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace fp4cl::cli
