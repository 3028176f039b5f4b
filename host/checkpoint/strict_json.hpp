// JSON parsing for checkpoint files, stricter than nlohmann's defaults: the text must be valid
// UTF-8 without NUL bytes (nlohmann ends its input at a NUL and ignores the rest), no object may
// repeat a key (nlohmann silently keeps the last), and nesting is bounded.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fp4cl {

// The offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF), or nothing when `text` is valid.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// Objects and arrays nested deeper than this are rejected.
constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value. Throws fp4cl::Error "<context>: <problem>" for invalid UTF-8,
// malformed JSON (a NUL byte included), a duplicate key (naming it and where it is) or nesting
// deeper than kMaxJsonDepth.
nlohmann::json parse_strict_json(std::string_view text, const std::string& context);

}  // namespace fp4cl
