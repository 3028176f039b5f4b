// Typed access to JSON config files whose every error names the file and the key path of the
// offending value ("/m/config.json: quantization_config.config_groups.group_0.weights.num_bits
// must be an integer, got string").
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp4cl/error.hpp"

namespace fp4cl::detail {

using Json = nlohmann::json;

// Where a JSON value sits: the file (or other source) and the dotted key path inside it.
class JsonPath {
 public:
  JsonPath(std::string file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}

  // The path of member `key` of the value at this path: "a.key", or a["key.with.dots"].
  JsonPath operator/(std::string_view key) const;
  // The path of element `index` of the array at this path: "ignore[3]".
  JsonPath operator[](std::size_t index) const;

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Throws fp4cl::Error "<file>: <path> <message>" (or "<file>: <message>" at the root).
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(where() + " " + fmt::format(format, std::forward<Args>(args)...));
  }

  // "<file>: <path>", or "<file>:" at the root.
  std::string where() const;

 private:
  std::string file_;
  std::string path_;
};

// Parses JSON text; malformed text throws "<source>: malformed JSON: <parser message>".
Json parse_json(std::string_view text, const std::string& source);

// Reads and parses a JSON file; a missing or unreadable file throws naming the path.
Json read_json_file(const std::filesystem::path& file);

// The member `key` of object `object`, or nullptr when it is absent or JSON null.
const Json* member(const Json& object, std::string_view key);

// Typed members: nullopt / nullptr when absent or null, an error naming `at / key` when the
// value has another type. `at` is the path of `object`.
std::optional<std::string> string_member(const Json& object, std::string_view key, const JsonPath& at);
std::optional<std::int64_t> integer_member(const Json& object, std::string_view key, const JsonPath& at);
std::optional<bool> bool_member(const Json& object, std::string_view key, const JsonPath& at);
std::optional<double> number_member(const Json& object, std::string_view key, const JsonPath& at);
const Json* object_member(const Json& object, std::string_view key, const JsonPath& at);
// An array of strings; absent or null gives an empty list.
std::vector<std::string> string_list_member(const Json& object, std::string_view key, const JsonPath& at);

// Throws unless `value` is an object ("<at> must be an object, got array").
void expect_object(const Json& value, const JsonPath& at);

// The value as it would appear in the file, for messages: "\"local\"", "true", "8".
std::string json_text(const Json& value);

}  // namespace fp4cl::detail
