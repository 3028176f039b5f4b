// Resolves `#include "path"` lines of kernel sources against a table of kernel files (the
// embedded one by default), so that no kernel needs a file at run time. Paths are relative to
// kernels/. Each file is included at most once (like #pragma once), and `#line` directives keep
// the compiler's messages pointing at the right file and line.
#include <set>
#include <string>
#include <string_view>

#include "cl/embedded_kernels.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

// What a source line is, as far as include resolution cares.
struct IncludeLine {
  enum Kind { other, quoted, malformed } kind = other;
  std::string_view target;  // the quoted path, for `quoted`
};

// `#include "path"` (white space allowed around '#') is resolved here. `#include <...>` and
// `#include MACRO` are left to the compiler: kernels/common files hold host-only
// `#include <cmath>` lines inside `#ifndef __OPENCL_VERSION__` branches. Include lines are
// resolved whether or not they sit in a live #if branch.
IncludeLine parse_include(std::string_view line) {
  constexpr std::string_view kBlank = " \t\r";
  std::size_t i = line.find_first_not_of(kBlank);
  if (i == std::string_view::npos || line[i] != '#') return {};
  i = line.find_first_not_of(kBlank, i + 1);
  if (i == std::string_view::npos || line.substr(i, 7) != "include") return {};
  i += 7;
  if (i < line.size() && kBlank.find(line[i]) == std::string_view::npos && line[i] != '"' && line[i] != '<')
    return {};  // e.g. #include_next, #includes: not an include directive we resolve
  i = line.find_first_not_of(kBlank, i);
  if (i == std::string_view::npos) return {IncludeLine::malformed, {}};
  if (line[i] != '"') return {};
  const std::size_t close = line.find('"', i + 1);
  if (close == std::string_view::npos || close == i + 1) return {IncludeLine::malformed, {}};
  return {IncludeLine::quoted, line.substr(i + 1, close - i - 1)};
}

class Resolver {
 public:
  explicit Resolver(const KernelSources& sources) : sources_(sources) {}

  void append(std::string_view path, std::string_view includer, std::size_t include_line) {
    const std::optional<std::string_view> text = sources_(path);
    if (!text) {
      if (includer.empty()) fail("no kernel source named '{}'", path);
      fail("kernel source {} (line {}) includes '{}', which is not a kernel source file", includer, include_line, path);
    }
    if (!seen_.insert(std::string(path)).second) return;
    line_directive(1, path);
    std::string_view rest = *text;
    for (std::size_t line_no = 1; !rest.empty(); ++line_no) {
      const std::size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      const IncludeLine inc = parse_include(line);
      if (inc.kind == IncludeLine::malformed)
        fail("kernel source {} line {}: malformed #include (expected #include \"path\"): {}", path, line_no, line);
      if (inc.kind == IncludeLine::quoted) {
        append(inc.target, path, line_no);
        line_directive(line_no + 1, path);
      } else {
        out_.append(line);
        out_.push_back('\n');
      }
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void line_directive(std::size_t line, std::string_view path) {
    out_ += "#line ";
    out_ += std::to_string(line);
    out_ += " \"";
    out_ += path;
    out_ += "\"\n";
  }

  const KernelSources& sources_;
  std::set<std::string> seen_;
  std::string out_;
};

}  // namespace

KernelSources embedded_kernel_sources() {
  return [](std::string_view path) -> std::optional<std::string_view> {
    for (const auto& f : detail::embedded_kernel_files()) {
      if (f.path == path) return f.source;
    }
    return std::nullopt;
  };
}

std::string kernel_source(const std::string& kernel_file, const KernelSources& sources) {
  if (!sources) fail("kernel_source({}): no kernel source table given", kernel_file);
  Resolver resolver(sources);
  resolver.append(kernel_file, {}, 0);
  return resolver.take();
}

std::string kernel_source(const std::string& kernel_file) {
  static const KernelSources embedded = embedded_kernel_sources();
  return kernel_source(kernel_file, embedded);
}

}  // namespace fp4cl
