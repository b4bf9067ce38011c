#pragma once
// Per-thread scratch for kernels that run on every training step.

#include <cstddef>
#include <vector>

namespace halox::ops::detail {

/// `n` elements of this thread's scratch buffer named by `Tag` (contents unspecified). The
/// buffer grows to the largest request and is then reused, so after the first step of a fixed
/// network the kernels allocate nothing. Buffers live at the same time need different tags; the
/// pointer stays valid until this thread's next request with the same tag and a larger `n`.
/// OpenMP workers each get their own buffer, as thread_local storage is per thread.
template <class T, class Tag> T* thread_scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

} // namespace halox::ops::detail
