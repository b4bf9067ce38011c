#include "ops/providers/memory.hpp"

#ifdef HALOX_OPS_ONEDNN
#include "ops/providers/onednn/onednn_common.hpp"
#endif

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
// One grow-only buffer per memory space, from the thread's scratch allocator or halox's own.
struct workspace {
  void* p = nullptr;
  std::size_t n = 0;
  allocator const* from = nullptr; // the allocator that gave p (null: space_ops)
};
struct workspaces {
  workspace host, device;
  allocator alloc; // set_scratch_allocator's, for this thread
  // At thread exit the caller's allocator may be gone already: what it gave is left to it.
  ~workspaces() {
    for (workspace* w : {&host, &device})
      if (w->from) *w = {};
    drop(host, memory_space::host);
    drop(device, memory_space::device);
  }
  void drop(workspace& w, memory_space m) noexcept {
    if (w.p) {
      if (w.from)
        w.from->deallocate(w.p, w.n,
                           m == memory_space::host ? memory_kind::host : memory_kind::device);
      else
        space_ops(m).release(w.p);
    }
    w = {};
  }
};
workspaces& thread_workspaces() {
  thread_local workspaces w;
  return w;
}
} // namespace

allocator const& scratch_allocator() noexcept { return thread_workspaces().alloc; }

void* shared_workspace(space_ops const& ops, std::size_t bytes) {
  workspaces& ws = thread_workspaces();
  bool const dev = !ops.host();
  workspace& w = dev ? ws.device : ws.host;
  if (bytes > w.n) {
    ws.drop(w, ops.space());
    if (ws.alloc.allocate) {
      w.p = ws.alloc.allocate(bytes, dev ? memory_kind::device : memory_kind::host);
      w.from = &ws.alloc;
    } else {
      w.p = ops.allocate(bytes);
    }
    w.n = bytes;
  }
  return w.p;
}

std::size_t shared_workspace_bytes(bool device) noexcept {
  workspaces const& w = thread_workspaces();
  return device ? w.device.n : w.host.n;
}

void release_shared_workspaces() noexcept {
  workspaces& w = thread_workspaces();
  w.drop(w.host, memory_space::host);
  w.drop(w.device, memory_space::device);
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

void scratch_mark() noexcept {
#ifdef HALOX_OPS_ONEDNN
  detail::onednn::arena().mark();
#endif
}

scratch_need scratch_asked() noexcept {
  scratch_need n;
#ifdef HALOX_OPS_ONEDNN
  static_assert(static_cast<int>(detail::onednn::role::count) <= 8, "scratch_need::part");
  detail::onednn::arena().asked(n.part);
  for (std::size_t v : n.part) n.bytes += v;
#endif
  return n;
}

void lend_scratch(void* p, scratch_need const& need) noexcept {
#ifdef HALOX_OPS_ONEDNN
  detail::onednn::arena().lend(p, need.part);
#else
  (void)p, (void)need;
#endif
}

void set_scratch_allocator(allocator const& a) {
  HALOX_REQUIRE(static_cast<bool>(a.allocate) == static_cast<bool>(a.deallocate),
                errc::invalid_argument,
                "set_scratch_allocator: set both allocate and deallocate, or neither");
  release_shared_scratch(); // every buffer goes back to what gave it
  detail::thread_workspaces().alloc = a;
}

} // namespace halox::ops
