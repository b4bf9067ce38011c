#include "ops/memory.hpp"

#include <halox/error.hpp>

#include <cstdlib>
#include <cstring>
#include <new>

namespace halox::ops::detail {

// The device half lives with the cuDNN provider (src/ops/cudnn/device_memory.cpp), the only part
// of halox::ops that links the CUDA runtime.
#ifdef HALOX_OPS_CUDNN
void* device_allocate(std::size_t bytes);
void device_release(void* p) noexcept;
void device_zero(void* p, std::size_t bytes);
void device_to_host(void* host_dst, void const* src, std::size_t bytes);
void device_from_host(void* dst, void const* host_src, std::size_t bytes);
bool device_visible(std::string& why);
#else
namespace {
[[noreturn]] void no_device() {
  ::halox::detail::throw_error(errc::unsupported,
                               "halox::ops was built without cuDNN, so it has no device memory; "
                               "reconfigure with -DHALOX_ENABLE_CUDNN=ON or use host buffers",
                               "space_ops", __FILE__, __LINE__);
}
} // namespace
void* device_allocate(std::size_t) { no_device(); }
void device_release(void*) noexcept {}
void device_zero(void*, std::size_t) { no_device(); }
void device_to_host(void*, void const*, std::size_t) { no_device(); }
void device_from_host(void*, void const*, std::size_t) { no_device(); }
bool device_visible(std::string& why) {
  why = "halox::ops was built without cuDNN (reconfigure with -DHALOX_ENABLE_CUDNN=ON)";
  return false;
}
#endif

void* space_ops::allocate(std::size_t bytes) const {
  if (bytes == 0) return nullptr;
  if (!host()) return device_allocate(bytes);
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void space_ops::release(void* p) const noexcept {
  if (p == nullptr) return;
  if (host())
    std::free(p);
  else
    device_release(p);
}

void space_ops::zero(void* p, std::size_t bytes) const {
  if (bytes == 0) return;
  if (host())
    std::memset(p, 0, bytes);
  else
    device_zero(p, bytes);
}

void space_ops::to_host(void* host_dst, void const* src, std::size_t bytes) const {
  if (bytes == 0) return;
  if (host())
    std::memcpy(host_dst, src, bytes);
  else
    device_to_host(host_dst, src, bytes);
}

void space_ops::from_host(void* dst, void const* host_src, std::size_t bytes) const {
  if (bytes == 0) return;
  if (host())
    std::memcpy(dst, host_src, bytes);
  else
    device_from_host(dst, host_src, bytes);
}

bool device_usable(std::string& why) { return device_visible(why); }

} // namespace halox::ops::detail
