// What a piece of code writes to the process's stderr: file descriptor 2 itself, so that what an
// OpenCL compiler or a progress bar writes there directly is caught too.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace fp4cl::test {

template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  std::FILE* capture = std::tmpfile();
  if (saved < 0 || capture == nullptr) {
    if (saved >= 0) ::close(saved);
    if (capture != nullptr) std::fclose(capture);
    throw std::runtime_error("stderr_of: cannot redirect stderr to a temporary file");
  }
  ::dup2(::fileno(capture), STDERR_FILENO);
  const auto restore = [&] {
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
  };
  try {
    f();
  } catch (...) {
    restore();
    std::fclose(capture);
    throw;
  }
  restore();
  std::rewind(capture);
  std::string written;
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) written.push_back(static_cast<char>(c));
  std::fclose(capture);
  return written;
}

}  // namespace fp4cl::test
