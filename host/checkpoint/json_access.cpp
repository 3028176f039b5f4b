#include "checkpoint/json_access.hpp"

#include <fstream>
#include <sstream>

#include "checkpoint/strict_json.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

JsonPath JsonPath::operator/(std::string_view key) const {
  // Keys that are module names contain dots; quote them so the path stays readable.
  if (key.find('.') != std::string_view::npos) return JsonPath(file_, fmt::format("{}[\"{}\"]", path_, key));
  return JsonPath(file_, path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key));
}

JsonPath JsonPath::operator[](std::size_t index) const {
  return JsonPath(file_, fmt::format("{}[{}]", path_, index));
}

std::string JsonPath::where() const {
  return path_.empty() ? file_ + ":" : fmt::format("{}: {}", file_, path_);
}

Json parse_json(std::string_view text, const std::string& source) {
  // Strict: invalid UTF-8, NUL bytes, duplicate keys and runaway nesting are errors too.
  return parse_strict_json(text, source);
}

Json read_json_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) fail("{}: no such file", file.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("{}: cannot open the file for reading", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: reading the file failed", file.string());
  return parse_json(text.str(), file.string());
}

const Json* member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

[[noreturn]] void wrong_type(const Json& value, const JsonPath& at, std::string_view expected) {
  at.fail("must be {}, got {} {}", expected, value.type_name(), json_text(value));
}

}  // namespace

std::optional<std::string> string_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(*v, at / key, "a string");
  return v->get<std::string>();
}

std::optional<std::int64_t> integer_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) wrong_type(*v, at / key, "an integer");
  return v->get<std::int64_t>();
}

std::optional<bool> bool_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(*v, at / key, "true or false");
  return v->get<bool>();
}

std::optional<double> number_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(*v, at / key, "a number");
  return v->get<double>();
}

const Json* object_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (v && !v->is_object()) wrong_type(*v, at / key, "an object");
  return v;
}

std::vector<std::string> string_list_member(const Json& object, std::string_view key, const JsonPath& at) {
  const Json* v = member(object, key);
  if (!v) return {};
  if (!v->is_array()) wrong_type(*v, at / key, "a list of strings");
  std::vector<std::string> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    if (!e.is_string()) wrong_type(e, (at / key)[i], "a string");
    out.push_back(e.get<std::string>());
  }
  return out;
}

void expect_object(const Json& value, const JsonPath& at) {
  if (!value.is_object()) wrong_type(value, at, "an object");
}

std::string json_text(const Json& value) {
  std::string s = value.dump();
  constexpr std::size_t limit = 80;
  if (s.size() > limit) s = s.substr(0, limit) + "...";
  return s;
}

}  // namespace fp4cl::detail
