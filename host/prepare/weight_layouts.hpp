// The device layouts of one layer's weights, made once at load and shared by the kernels that
// read the same layout (a decode and a prefill kernel of one layer hold one copy, not two).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

namespace fp4cl {

class WeightLayouts {
 public:
  // The layout stored under `key`, made by `make()` (returning a T) the first time it is asked for.
  template <typename T, typename Make>
  std::shared_ptr<const T> get_or_make(const std::string& key, Make&& make) {
    if (auto it = layouts_.find(key); it != layouts_.end()) return std::static_pointer_cast<const T>(it->second);
    std::shared_ptr<const T> made = std::make_shared<const T>(make());
    layouts_.emplace(key, made);
    return made;
  }
  std::size_t size() const { return layouts_.size(); }

 private:
  std::map<std::string, std::shared_ptr<const void>> layouts_;
};

}  // namespace fp4cl
