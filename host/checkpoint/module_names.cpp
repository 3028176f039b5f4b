// Natural ordering of module names and their layer numbers.
#include "checkpoint/module_names.hpp"

namespace fp4cl::detail {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::size_t digits_end(std::string_view s, std::size_t i) {
  while (i < s.size() && is_digit(s[i])) ++i;
  return i;
}

}  // namespace

bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      const std::size_t ie = digits_end(a, i), je = digits_end(b, j);
      std::size_t is = i, js = j;  // skip leading zeros for the value comparison
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.substr(is, ie - is).compare(b.substr(js, je - js));
      if (c != 0) return c < 0;
      if (ie - i != je - j) return ie - i < je - j;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

NumberedName split_layer_number(std::string_view name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('.', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (!part.empty() && part.size() <= 9 && digits_end(part, 0) == part.size()) {
      NumberedName n;
      n.pattern = std::string(name.substr(0, start)) + "{}" + std::string(name.substr(end));
      n.number = std::stoll(std::string(part));
      return n;
    }
    start = end + 1;
  }
  return NumberedName{std::string(name), std::nullopt};
}

std::string beside_experts(std::string_view experts_container, std::string_view sibling) {
  const std::size_t dot = experts_container.rfind('.');
  std::string out(dot == std::string_view::npos ? std::string_view() : experts_container.substr(0, dot + 1));
  out += sibling;
  return out;
}

}  // namespace fp4cl::detail
