#include "ops/memory.hpp"

#include <halox/error.hpp>
#include <halox/ops/provider.hpp>

#include <algorithm>
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

namespace {
struct workspaces {
  space_buffer<char> host{space_ops(memory_space::host)};
  space_buffer<char> device{space_ops(memory_space::device)};
  std::size_t host_n = 0, device_n = 0;
};
workspaces& thread_workspaces() {
  thread_local workspaces w;
  return w;
}
} // namespace

void* shared_workspace(space_ops const& ops, std::size_t bytes) {
  workspaces& w = thread_workspaces();
  bool const dev = !ops.host();
  std::size_t& n = dev ? w.device_n : w.host_n;
  void* p = (dev ? w.device : w.host).reserve(bytes);
  if (bytes > n) n = bytes;
  return p;
}

std::size_t shared_workspace_bytes(bool device) noexcept {
  workspaces const& w = thread_workspaces();
  return device ? w.device_n : w.host_n;
}

void release_shared_workspaces() noexcept {
  workspaces& w = thread_workspaces();
  w.host = space_buffer<char>(space_ops(memory_space::host));
  w.device = space_buffer<char>(space_ops(memory_space::device));
  w.host_n = w.device_n = 0;
}

} // namespace halox::ops::detail

namespace halox::ops {

#ifdef HALOX_OPS_ONEDNN
namespace detail::onednn {
std::size_t arena_bytes() noexcept;
std::size_t arena_peak() noexcept;
void arena_release() noexcept;
} // namespace detail::onednn
#endif

shared_scratch shared_scratch_bytes() noexcept {
  shared_scratch s;
  s.host = detail::shared_workspace_bytes(false);
  s.device = detail::shared_workspace_bytes(true);
  std::size_t arena_peak = 0;
#ifdef HALOX_OPS_ONEDNN
  s.host += detail::onednn::arena_bytes();
  arena_peak = detail::onednn::arena_peak();
#endif
  // The workspaces only grow; the arena's peak is its own.
  s.peak = std::max(s.host + s.device, detail::shared_workspace_bytes(false) +
                                           detail::shared_workspace_bytes(true) + arena_peak);
  return s;
}

void release_shared_scratch() noexcept {
  detail::release_shared_workspaces();
#ifdef HALOX_OPS_ONEDNN
  detail::onednn::arena_release();
#endif
}

} // namespace halox::ops
