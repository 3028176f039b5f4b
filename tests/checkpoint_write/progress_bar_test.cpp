// The CLI's progress bar: what a line shows, and that a disabled bar (stderr not a terminal)
// stays silent.
#include <gtest/gtest.h>

#include <string>

#include "fp4cl/progress.hpp"
#include "support/stderr_capture.hpp"

namespace fp4cl::cli {
namespace {

TEST(ProgressBar, RendersStageFractionAndMegabytes) {
  EXPECT_EQ(ProgressBar::render("quantizing", 0, 2000000),
            "quantizing [..............................]   0%      0.0/2.0 MB");
  EXPECT_EQ(ProgressBar::render("quantizing", 1000000, 2000000),
            "quantizing [###############...............]  50%      1.0/2.0 MB");
  EXPECT_EQ(ProgressBar::render("writing", 2000000, 2000000),
            "writing    [##############################] 100%      2.0/2.0 MB");
  // Nothing to do counts as done; more than the total is clamped.
  EXPECT_EQ(ProgressBar::render("writing", 0, 0),
            "writing    [##############################] 100%      0.0/0.0 MB");
  EXPECT_EQ(ProgressBar::render("x", 5, 4).substr(0, 45), ProgressBar::render("x", 4, 4).substr(0, 45));
}

TEST(ProgressBar, DisabledBarWritesNothing) {
  const std::string written = test::stderr_of([] {
    {
      ProgressBar bar(false);
      const ProgressCallback callback = bar.callback();
      callback({"quantizing", 1, 2});
      bar.update("writing", 2, 2);
      bar.finish();
    }
    {
      ProgressBar bar(true);
      bar.update("writing", 1, 2);
    }
  });
  // Only the enabled bar drew: one line, ended when it went out of scope.
  EXPECT_EQ(written, "\r" + ProgressBar::render("writing", 1, 2) + "\n");
}

}  // namespace
}  // namespace fp4cl::cli
