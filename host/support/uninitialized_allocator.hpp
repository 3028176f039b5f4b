// A std::allocator whose value-initialization leaves new elements uninitialized.
#pragma once

#include <memory>
#include <new>
#include <utility>

namespace fp4cl {

// An allocator whose new elements are left uninitialized, for buffers that are written whole
// right after they are sized: their pages are first touched by the threads that fill them, not
// zeroed on one thread before (on the 2-core VM zeroing took 0.4–1 s of a 400 MB layout).
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

}  // namespace fp4cl
