#include "checkpoint/module_pattern.hpp"

#include <optional>

namespace fp4cl::detail {

namespace {

// A "[...]" set starting at pattern[open]: where it ends (one past ']') and whether `c` is in it.
// nullopt when there is no closing ']' (the '[' is then a literal character).
struct SetMatch {
  std::size_t end;
  bool contains;
};

std::optional<SetMatch> match_set(std::string_view pattern, std::size_t open, char c) {
  std::size_t i = open + 1;
  const bool negate = i < pattern.size() && pattern[i] == '!';
  if (negate) ++i;
  const std::size_t first = i;
  // A ']' right after "[" or "[!" is a member, not the end.
  if (i < pattern.size() && pattern[i] == ']') ++i;
  while (i < pattern.size() && pattern[i] != ']') ++i;
  if (i >= pattern.size()) return std::nullopt;
  bool in = false;
  for (std::size_t j = first; j < i; ++j) {
    if (j + 2 < i && pattern[j + 1] == '-') {
      if (pattern[j] <= c && c <= pattern[j + 2]) in = true;
      j += 2;
    } else if (pattern[j] == c) {
      in = true;
    }
  }
  return SetMatch{i + 1, in != negate};
}

}  // namespace

bool fnmatch(std::string_view name, std::string_view pattern) {
  // Greedy matching with backtracking to the last '*': linear in practice for module names.
  std::size_t n = 0, p = 0;
  std::size_t star = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size()) {
      const char c = pattern[p];
      if (c == '*') {
        star = p++;
        star_n = n;
        continue;
      }
      if (c == '?') {
        ++p;
        ++n;
        continue;
      }
      if (c == '[') {
        if (const auto set = match_set(pattern, p, name[n])) {
          if (set->contains) {
            p = set->end;
            ++n;
            continue;
          }
        } else if (name[n] == '[') {  // unclosed '[' is literal
          ++p;
          ++n;
          continue;
        }
      } else if (c == name[n]) {
        ++p;
        ++n;
        continue;
      }
    }
    if (star == std::string_view::npos) return false;
    p = star + 1;
    n = ++star_n;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ModulePattern ModulePattern::compressed_tensors(const std::string& entry, const JsonPath& at) {
  constexpr std::string_view prefix = "re:";
  if (entry.compare(0, prefix.size(), prefix) == 0) {
    ModulePattern pattern(Kind::regex, entry);
    try {
      pattern.regex_ = std::make_shared<const std::regex>(entry.substr(prefix.size()), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      at.fail("'{}' is not a regular expression fp4cl can compile (ECMAScript syntax; Python-only "
              "syntax such as (?P<name>...), look-behind or inline flags is not supported): {}",
              entry, e.what());
    }
    return pattern;
  }
  if (entry == "Linear") return ModulePattern(Kind::linear_class, entry);
  if (entry.empty()) at.fail("is an empty string, expected a module name, \"re:<regex>\" or \"Linear\"");
  return ModulePattern(Kind::exact, entry);
}

ModulePattern ModulePattern::modelopt(const std::string& entry) {
  const bool wild = entry.find_first_of("*?[") != std::string::npos;
  return ModulePattern(wild ? Kind::wildcard : Kind::exact, entry);
}

bool ModulePattern::matches(std::string_view module) const {
  switch (kind_) {
    case Kind::exact:
      return module == text_;
    case Kind::regex:
      return std::regex_search(module.begin(), module.end(), *regex_, std::regex_constants::match_continuous);
    case Kind::linear_class:
      return true;
    case Kind::wildcard:
      return fnmatch(module, text_);
  }
  return false;
}

}  // namespace fp4cl::detail
