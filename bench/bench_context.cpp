#include "bench_context.hpp"

namespace fp4cl::bench {

namespace {
std::string& selector_storage() {
  static std::string selector;
  return selector;
}
}  // namespace

void set_device_selector(const std::string& selector) { selector_storage() = selector; }
const std::string& device_selector() { return selector_storage(); }

Context bench_context() {
  const std::string& s = selector_storage();
  return s.empty() ? Context::create() : Context::create(s);
}

}  // namespace fp4cl::bench
