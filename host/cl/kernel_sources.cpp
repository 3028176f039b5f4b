// Resolves `#include "..."` in embedded kernel sources against the embedded table, so that no
// kernel needs a file at run time. Each file is included at most once (like #pragma once).
#include <set>
#include <string>
#include <string_view>

#include "cl/embedded_kernels.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

const detail::EmbeddedFile* find_file(std::string_view path) {
  for (const auto& f : detail::embedded_kernel_files()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

// Returns the quoted path of an `#include "path"` line, or "" for any other line.
std::string_view include_target(std::string_view line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string_view::npos || line[i] != '#') return {};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string_view::npos || line.substr(i, 7) != "include") return {};
  const std::size_t open = line.find('"', i + 7);
  if (open == std::string_view::npos) return {};
  const std::size_t close = line.find('"', open + 1);
  if (close == std::string_view::npos) return {};
  return line.substr(open + 1, close - open - 1);
}

void append_resolved(std::string_view path, std::string_view included_from, std::set<std::string>& seen,
                     std::string& out, int depth) {
  if (depth > 32) fail("kernel source {}: #include nesting deeper than 32 (a cycle?)", path);
  const auto* file = find_file(path);
  if (!file) {
    if (included_from.empty()) fail("no embedded kernel source named '{}'", path);
    fail("kernel source {} includes '{}', which is not an embedded kernel file", included_from, path);
  }
  if (!seen.insert(std::string(path)).second) return;
  std::string_view text = file->source;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    const std::string_view target = include_target(line);
    if (!target.empty()) {
      append_resolved(target, path, seen, out, depth + 1);
    } else {
      out.append(line);
      out.push_back('\n');
    }
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace

std::string kernel_source(const std::string& kernel_file) {
  std::set<std::string> seen;
  std::string out;
  append_resolved(kernel_file, "", seen, out, 0);
  return out;
}

}  // namespace fp4cl
