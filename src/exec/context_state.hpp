#pragma once
// What a halox::context holds, shared by its plans and their executors: the private
// communicator, the allocator, the tag counter and the transports' resources made on demand.
// Defined at the executor layer, because executors draw on it; the public class only holds a
// pointer to it, and plans only pass it along.

#include "exec/peer_notice.hpp"
#include "exec/transport_resources.hpp"
#include <halox/context.hpp>

#include <halox/detail/mpi_handle.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>

namespace halox::detail {

struct context_state {
  context_state() = default;
  /// Drops the messages of abandoned exchanges still queued on the communicators (see
  /// detail::drain_unexpected), so that the MPI library does not warn about them at exit.
  ~context_state();
  context_state(context_state const&) = delete;
  context_state& operator=(context_state const&) = delete;

  detail::unique_comm comm;
  /// The failure notices' side channel (exec/peer_notice.hpp), destroyed before `comm`.
  detail::notice_channel notices;
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  std::size_t plans = 0;
  std::size_t tag_base = 0; ///< where this context's tags start (see make_state)
  long long index = 0;      ///< this context's number in the process, the same on every rank of it
  allocator alloc;          ///< empty: halox's own allocations
  std::array<std::size_t, 3> in_use{}; ///< bytes held, per memory_kind
  /// Each transport's resources (the UCX worker and endpoints, the NCCL communicator), made by
  /// its first executor at plan construction, or why the transport could not start. Destroyed
  /// before `comm`.
  detail::transport_slots transports;
  /// Why no plan of this context may run or be built any more (empty: they may). Set, on every
  /// rank of an exchange alike, when a collective exchange was left unfinished (a rank failed
  /// at execute, or a wait timed out): the next collective on `comm` would be matched with it.
  std::string unusable;
  double timeout = 0.0;       ///< seconds, 0: unbounded (options, $HALOX_TIMEOUT or the default)
  bool check_execute = false; ///< options or $HALOX_CHECK=1
  /// mpi_pipeline's fragment size in bytes (options or $HALOX_PIPELINE_FRAGMENT; 0: automatic),
  /// the same on every rank (checked when the context is built).
  std::size_t pipeline_fragment = 0;
  int device = -1;           ///< made current at construction (select_device), or -1
  std::string device_reason; ///< why that device (halox::device_choice::reason)

  /// Allocates through the allocator (or halox's own); throws `halox::error` on failure.
  /// `like_caller`: host memory that stands in for a caller's tensor (the autotuner's scratch):
  /// halox's own allocation then keeps to ordinary pages, as a caller's would, where a plan
  /// workspace of 2 MiB or more goes on huge pages (exec/host_memory.hpp).
  void* allocate(std::size_t bytes, memory_kind kind, bool like_caller = false);
  /// Releases what `allocate` returned (same size, kind and `like_caller`).
  void deallocate(void* p, std::size_t bytes, memory_kind kind, bool like_caller = false) noexcept;
  /// The next plan's message tag (1 .. tag_ub, cycling). Plans are built collectively, in the
  /// same order on every rank, so every rank hands out the same tag.
  int next_tag() noexcept;
};

/// One allocation from a context, released on destruction (move-only). Holds the context so the
/// allocator outlives the memory.
class memory_block {
public:
  memory_block() = default;
  memory_block(std::shared_ptr<context_state> ctx, std::size_t bytes, memory_kind kind,
               bool like_caller = false);
  ~memory_block();
  memory_block(memory_block&& o) noexcept;
  memory_block& operator=(memory_block&& o) noexcept;
  memory_block(memory_block const&) = delete;
  memory_block& operator=(memory_block const&) = delete;

  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// Keeps the memory allocated for the rest of the process (MPI may still read it: a send
  /// that could be neither completed nor cancelled when its plan was destroyed).
  void orphan() noexcept;

private:
  void release() noexcept;
  std::shared_ptr<context_state> ctx_;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  memory_kind kind_ = memory_kind::host;
  bool like_caller_ = false;
};

/// Default device / pinned allocations (cudaMalloc, cudaMallocHost); throw `halox::error`
/// (unsupported) in builds without CUDA.
void* default_device_allocate(std::size_t bytes, memory_kind kind);
void default_device_deallocate(void* p, memory_kind kind) noexcept;

} // namespace halox::detail
