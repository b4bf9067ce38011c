#include "tune/scratch_buffers.hpp"

#include "exec/device_stream.hpp"

#include <cstring>

namespace halox::detail {

namespace {
// Never hand a null pointer to an executor, even for an empty slot.
constexpr std::size_t min_bytes = 64;

std::size_t slot_bytes(slot_layout const& l) {
  std::size_t const n = static_cast<std::size_t>(l.elements > 0 ? l.elements : 0) * l.elem_size;
  return n < min_bytes ? min_bytes : n;
}
} // namespace

scratch_buffers::scratch_buffers(schedule const& s, memory_space mem,
                                 std::shared_ptr<context_state> const& ctx) {
  if (mem == memory_space::host) {
    for (auto const& l : s.slots) {
      blocks_.emplace_back(ctx, slot_bytes(l), memory_kind::host, /*like_caller=*/true);
      std::memset(blocks_.back().data(), 0, blocks_.back().size());
      ptrs_.push_back(blocks_.back().data());
    }
    return;
  }
  device_ = std::make_unique<device_stream>(); // throws in a build without CUDA
  for (auto const& l : s.slots) {
    std::size_t const n = slot_bytes(l);
    blocks_.emplace_back(ctx, n, memory_kind::device);
    device_->zero(blocks_.back().data(), n);
    ptrs_.push_back(blocks_.back().data());
  }
  device_->synchronize();
}

scratch_buffers::~scratch_buffers() = default;

void* scratch_buffers::stream() const noexcept { return device_ ? device_->get() : nullptr; }

void scratch_buffers::synchronize() {
  if (device_) device_->synchronize();
}

std::string device_kind(memory_space mem) {
  return mem == memory_space::host ? "host" : current_device_name();
}

} // namespace halox::detail
