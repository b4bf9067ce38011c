#pragma once
// Scratch buffers with a plan's real slot layouts, on which candidates are timed, so that
// selection never touches the caller's data (there is none at plan time anyway).

#include "exec/context_state.hpp"
#include "exec/device_stream.hpp"
#include "plan/schedule.hpp"

#include <halox/backend.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// One buffer per slot of `slots[i].elements * elem_size` bytes, allocated once from the plan's
/// context, zeroed, in host memory or (CUDA builds) device memory, plus a stream for device
/// candidates.
class scratch_buffers {
public:
  scratch_buffers(schedule const& s, memory_space mem, std::shared_ptr<context_state> const& ctx);
  ~scratch_buffers();
  scratch_buffers(scratch_buffers const&) = delete;
  scratch_buffers& operator=(scratch_buffers const&) = delete;

  /// Slot pointers to pass to `executor::start`.
  [[nodiscard]] void* const* slots() const noexcept { return ptrs_.data(); }
  /// The stream to pass to `start`/`wait` (a cudaStream_t for device memory, else null).
  [[nodiscard]] void* stream() const noexcept;
  /// Blocks until the work enqueued on `stream()` is done (device memory; no-op on the host),
  /// so a host clock read afterwards covers the whole exchange.
  void synchronize();

private:
  std::vector<memory_block> blocks_;
  std::unique_ptr<device_stream> device_; // device memory only
  std::vector<void*> ptrs_;
};

/// What the plan cache calls the hardware the buffers live on: "host" for host memory, the
/// CUDA device's name for device memory.
[[nodiscard]] std::string device_kind(memory_space mem);

} // namespace halox::detail
