#include <algorithm>
#include <cctype>
#include <string>

#include "fp4cl/program_cache.hpp"
#include "support/check.hpp"

namespace fp4cl {

namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == '_' || std::isalnum(c); });
}

// A printable token that survives clBuildProgram's splitting of the option string on white
// space unchanged (no quoting or escaping there to get wrong).
bool is_option_token(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return c > 0x20 && c < 0x7f && c != '"' && c != '\'' && c != '\\';
  });
}

}  // namespace

BuildOptions& BuildOptions::define(const std::string& name, long long value) {
  return define(name, std::to_string(value));
}

BuildOptions& BuildOptions::define(const std::string& name, const std::string& value) {
  if (!is_identifier(name))
    fail("BuildOptions::define: '{}' is not a valid macro name (expected a C identifier such as TILE_N)", name);
  if (!is_option_token(value))
    fail("BuildOptions::define({}): the value '{}' must be a non-empty printable token without white space, "
         "quotes or backslashes",
         name, value);
  defines_[name] = value;
  return *this;
}

BuildOptions& BuildOptions::flag(const std::string& f) {
  if (!is_option_token(f) || f[0] != '-')
    fail("BuildOptions::flag: '{}' is not one compiler flag (expected e.g. -cl-mad-enable: a leading '-', "
         "no white space, quotes or backslashes)",
         f);
  if (f.compare(0, 2, "-D") == 0) fail("BuildOptions::flag: '{}' is a define; use BuildOptions::define", f);
  if (f.compare(0, 2, "-I") == 0)
    fail("BuildOptions::flag: '{}': kernel includes are resolved from the embedded kernel files, not a path", f);
  if (std::find(flags_.begin(), flags_.end(), f) == flags_.end()) flags_.push_back(f);
  return *this;
}

BuildOptions& BuildOptions::flag(const std::string& f, const std::string& value) {
  if (!is_option_token(value) || value[0] == '-')
    fail("BuildOptions::flag({}): the argument '{}' must be one printable token without white space, quotes or "
         "backslashes that does not start with '-'",
         f, value);
  BuildOptions checked;
  checked.flag(f);  // the flag's own rules
  const std::string entry = f + " " + value;  // one entry: sorting keeps the two words together
  if (std::find(flags_.begin(), flags_.end(), entry) == flags_.end()) flags_.push_back(entry);
  return *this;
}

std::string BuildOptions::str() const {
  std::string s;
  for (const auto& [name, value] : defines_) {
    if (!s.empty()) s += ' ';
    s += "-D" + name + "=" + value;
  }
  std::vector<std::string> flags = flags_;
  std::sort(flags.begin(), flags.end());
  for (const auto& f : flags) {
    if (!s.empty()) s += ' ';
    s += f;
  }
  return s;
}

}  // namespace fp4cl
