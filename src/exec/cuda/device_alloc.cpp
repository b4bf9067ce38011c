// Default device and page-locked allocations of a context without a caller allocator.

#include "exec/context_state.hpp"

#include "exec/cuda/cuda_handle.hpp"
#include <halox/error.hpp>

namespace halox::detail {

void* default_device_allocate(std::size_t bytes, memory_kind kind) {
  void* p = nullptr;
  if (kind == memory_kind::pinned_host)
    HALOX_CUDA_CHECK(cudaMallocHost(&p, bytes));
  else
    HALOX_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void default_device_deallocate(void* p, memory_kind kind) noexcept {
  if (kind == memory_kind::pinned_host)
    cudaFreeHost(p);
  else
    cudaFree(p);
}

} // namespace halox::detail
