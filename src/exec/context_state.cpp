#include "exec/context_state.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#include "exec/host_memory.hpp"

#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace halox {

detail::context_state::~context_state() { detail::drain_unexpected(comm.get()); }

void* detail::context_state::allocate(std::size_t bytes, memory_kind kind, bool like_caller) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (alloc.allocate) {
    p = alloc.allocate(bytes, kind);
    HALOX_REQUIRE(p != nullptr, errc::invalid_argument,
                  std::string("the context's allocator returned null for ") +
                      std::to_string(bytes) + " bytes of " + to_string(kind) +
                      " memory; return memory or throw");
    HALOX_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 64 == 0, errc::invalid_argument,
                  std::string("the context's allocator returned ") + to_string(kind) +
                      " memory that is not 64-byte aligned; align allocations to 64 bytes");
  } else if (kind == memory_kind::host) {
    p = detail::host_allocate(bytes, !like_caller);
  } else {
    p = detail::default_device_allocate(bytes, kind);
  }
  in_use[static_cast<int>(kind)] += bytes;
  return p;
}

void detail::context_state::deallocate(void* p, std::size_t bytes, memory_kind kind,
                                       bool like_caller) noexcept {
  if (p == nullptr) return;
  in_use[static_cast<int>(kind)] -= bytes;
  if (alloc.deallocate)
    alloc.deallocate(p, bytes, kind);
  else if (kind == memory_kind::host)
    detail::host_deallocate(p, bytes, !like_caller);
  else
    detail::default_device_deallocate(p, kind);
}

int detail::context_state::next_tag() noexcept {
  ++plans;
  return 1 + static_cast<int>((tag_base + plans - 1) % static_cast<std::size_t>(tag_ub));
}

} // namespace halox

namespace halox::detail {

memory_block::memory_block(std::shared_ptr<context_state> ctx, std::size_t bytes, memory_kind kind,
                           bool like_caller)
    : ctx_(std::move(ctx)), bytes_(bytes), kind_(kind), like_caller_(like_caller) {
  p_ = ctx_->allocate(bytes, kind, like_caller);
}

memory_block::~memory_block() { release(); }

memory_block::memory_block(memory_block&& o) noexcept
    : ctx_(std::move(o.ctx_)), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      kind_(o.kind_), like_caller_(o.like_caller_) {}

memory_block& memory_block::operator=(memory_block&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::move(o.ctx_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    kind_ = o.kind_;
    like_caller_ = o.like_caller_;
  }
  return *this;
}

void memory_block::release() noexcept {
  if (p_ && ctx_) ctx_->deallocate(p_, bytes_, kind_, like_caller_);
  p_ = nullptr;
  bytes_ = 0;
}

void memory_block::orphan() noexcept {
  // Deliberately kept until the process ends: freeing it could let MPI write into reused memory.
  static std::mutex m;
  static auto* kept = new std::vector<memory_block>();
  if (!p_) return;
  std::lock_guard<std::mutex> lock(m);
  try {
    kept->push_back(std::move(*this));
  } catch (...) {
    p_ = nullptr; // leak rather than free memory MPI may still touch
  }
}

#if !HALOX_HAS_CUDA
void* default_device_allocate(std::size_t, memory_kind kind) {
  throw error(errc::unsupported,
              std::string("allocating ") + to_string(kind) +
                  " memory needs a CUDA build of halox (-DHALOX_ENABLE_CUDA=ON)");
}
void default_device_deallocate(void*, memory_kind) noexcept {}
#endif

} // namespace halox::detail
