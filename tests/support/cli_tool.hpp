// Running the built `fp4cl` tool from a test and capturing what it prints (the test target defines
// FP4CL_CLI_PATH, the tool's path).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {

struct ToolRun {
  int status = -1;  // the exit status, -1 when the tool did not exit normally
  std::string out, err;
};

// Runs `fp4cl <args>` (args are passed to the shell as written), capturing stdout and stderr in
// files of `scratch`.
inline ToolRun run_tool(const std::string& args, const TempDir& scratch) {
  const std::filesystem::path out = scratch.path() / "tool.stdout", err = scratch.path() / "tool.stderr";
  const std::string command =
      std::string("'") + FP4CL_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int raw = std::system(command.c_str());
  ToolRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = file_text(out);
  r.err = file_text(err);
  return r;
}

// gtest's message for a run: its status and output.
inline std::string describe(const ToolRun& r) {
  return "status " + std::to_string(r.status) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

}  // namespace fp4cl::test
