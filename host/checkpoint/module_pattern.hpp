// How a quantization config names modules: exact names, compressed-tensors "re:" regular
// expressions and class-name targets, and ModelOpt fnmatch wildcards.
#pragma once

#include <memory>
#include <regex>
#include <string>
#include <string_view>

#include "checkpoint/json_access.hpp"

namespace fp4cl::detail {

// Python fnmatch.fnmatchcase semantics over the whole name: '*' matches any run of characters
// (dots included), '?' one character, "[seq]" / "[!seq]" a character (not) in seq, with ranges
// "a-z"; a '[' without a closing ']' is a literal '['. No escape character.
bool fnmatch(std::string_view name, std::string_view pattern);

class ModulePattern {
 public:
  // How specific a match is; compressed-tensors prefers exact names over regexes over classes.
  enum class Kind {
    exact,         // the whole module name
    regex,         // compressed-tensors "re:<regex>", matched from the start of the name
    linear_class,  // compressed-tensors class target "Linear": every linear module
    wildcard,      // ModelOpt fnmatch pattern
  };

  // A compressed-tensors `targets` / `ignore` entry at `at`. The regex after "re:" uses
  // ECMAScript syntax, which covers what these configs use (".*", "\\d+", "[0-9]", "(a|b)",
  // "$"); Python-only syntax ("(?P<name>", look-behind, inline flags) is rejected with an
  // error naming the entry. Matching is anchored at the start only, like Python's re.match.
  static ModulePattern compressed_tensors(const std::string& entry, const JsonPath& at);

  // A ModelOpt `exclude_modules` entry (fnmatch wildcard; without wildcard characters it is an
  // exact name).
  static ModulePattern modelopt(const std::string& entry);

  bool matches(std::string_view module) const;
  Kind kind() const { return kind_; }
  const std::string& text() const { return text_; }  // as written in the config

 private:
  ModulePattern(Kind kind, std::string text) : kind_(kind), text_(std::move(text)) {}

  Kind kind_;
  std::string text_;
  std::shared_ptr<const std::regex> regex_;  // for Kind::regex
};

}  // namespace fp4cl::detail
