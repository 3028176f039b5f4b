#include "checkpoint/strict_json.hpp"

#include <set>
#include <vector>

#include "support/check.hpp"

namespace fp4cl {

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (n - i < length) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += length;
  }
  return std::nullopt;
}

namespace {

// Where the parser is: one frame per open object or array.
struct Frame {
  bool is_object = false;
  std::string path;  // "" for the top level, else "/a/b" (keys; "[]" for array elements)
  std::set<std::string> keys;
  std::string last_key;
};

// Thrown from the parser callback and turned into fp4cl::Error after the parser unwound.
struct StrictJsonViolation {
  std::string message;
};

std::string describe(const std::string& path) {
  return path.empty() ? std::string("the top-level object") : "object \"" + path + "\"";
}

}  // namespace

nlohmann::json parse_strict_json(std::string_view text, const std::string& context) {
  if (auto bad = find_invalid_utf8(text)) fail("{}: not valid UTF-8 (byte {})", context, *bad);
  // JSON text never holds a raw NUL, but nlohmann stops at one as if the input ended there.
  const std::size_t nul = text.find('\0');
  if (nul != std::string_view::npos) fail("{}: malformed JSON: a NUL byte at byte {}", context, nul);

  std::vector<Frame> frames;
  auto callback = [&frames](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start: {
        if (depth >= kMaxJsonDepth) {
          throw StrictJsonViolation{"JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        }
        Frame frame;
        frame.is_object = event == Event::object_start;
        if (!frames.empty()) {
          const Frame& parent = frames.back();
          frame.path = parent.path + "/" + (parent.is_object ? parent.last_key : std::string("[]"));
        }
        frames.push_back(std::move(frame));
        break;
      }
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key: {
        Frame& frame = frames.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!frame.keys.insert(key).second) {
          throw StrictJsonViolation{"duplicate key \"" + key + "\" in " + describe(frame.path)};
        }
        frame.last_key = key;
        break;
      }
      case Event::value:
        break;
    }
    return true;
  };

  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const StrictJsonViolation& v) {
    fail("{}: {}", context, v.message);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann prefixes "[json.exception.parse_error.101] "; the rest says where and what.
    std::string what = e.what();
    if (!what.empty() && what[0] == '[') {
      const std::size_t close = what.find("] ");
      if (close != std::string::npos) what.erase(0, close + 2);
    }
    fail("{}: malformed JSON: {}", context, what);
  }
}

}  // namespace fp4cl
