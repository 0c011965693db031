// Storage aligned to a cache line, for buffers the kernels stream through:
// a 64-byte load that straddles two lines costs two, and a std::vector's
// large allocations start 16 bytes past a page boundary.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tandem {

template <class T, size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign))); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(kAlign)); }
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) { return true; }
};

// A float vector whose data() is 64-byte aligned.
using AlignedFloats = std::vector<float, AlignedAllocator<float>>;

}  // namespace tandem
