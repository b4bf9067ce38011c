#pragma once
/// \file context.hpp
/// The transport resources that every plan built on one communicator shares: the private
/// communicator, the NCCL communicator, the caller's memory allocator and message tags.

#include <halox/backend.hpp>

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace halox {

/// The watchdog's bound, in seconds, on every wait of a plan when neither the options nor
/// $HALOX_TIMEOUT set one. Long, like the default timeouts of NCCL and torch.distributed: a
/// rank that is only slow (a first epoch, a checkpoint, an oversubscribed node) must not be
/// taken for a missing one, while a job that truly hangs still ends with a message.
inline constexpr double default_timeout_seconds = 300.0;

/// Kinds of memory a plan may ask an allocator for.
enum class memory_kind {
  host,        ///< ordinary CPU memory (pack buffers of host plans, scratch)
  pinned_host, ///< page-locked CPU memory (staging of `staged_mpi`; cudaMallocHost by default)
  device       ///< CUDA device memory (pack streams and descriptors of device plans)
};

/// Name of a memory kind ("host", "pinned_host", "device").
[[nodiscard]] char const* to_string(memory_kind k) noexcept;

/// Allocation hooks, so that a framework's caching allocator owns every byte halox uses.
/// Both must be set, or neither (halox then uses operator new, cudaMallocHost and cudaMalloc).
/// `allocate` returns memory aligned to at least 64 bytes (256 for device memory is typical),
/// or throws; it is called at plan construction only, never while executing a plan.
struct allocator {
  /// Returns `bytes` bytes (bytes > 0) of memory of kind `kind`.
  std::function<void*(std::size_t bytes, memory_kind kind)> allocate;
  /// Releases what `allocate` returned, with the same size and kind.
  std::function<void(void* p, std::size_t bytes, memory_kind kind)> deallocate;
};

/// Options of a context. Every rank must pass equivalent options.
struct context_options {
  allocator alloc; ///< where plan memory comes from (empty: halox's own allocations)
  /// Bound, in seconds, on every wait of the context's plans (exchanges and the collective
  /// rounds of plan construction): a wait that lasts longer throws `halox::error`
  /// (errc::timeout) naming the plan, the peers whose messages have not arrived and the bytes
  /// outstanding, and prints it on that rank. Unset: $HALOX_TIMEOUT when set, else
  /// `default_timeout_seconds`. 0 (or HALOX_TIMEOUT=0) turns the watchdog off: waits are then
  /// unbounded, though a peer that fails its own checks at execute is still reported at once
  /// (errc::peer_failed).
  std::optional<double> timeout_seconds;
  /// Every execution first agrees with all ranks (one small all-reduce) that each rank passes
  /// valid buffers to the same plan in the same direction, so a bad buffer or a rank executing
  /// another plan is an error on every rank instead of a hang. false: $HALOX_CHECK=1 turns it
  /// on. Off by default: it costs one all-reduce per execution.
  bool check_execute = false;
  /// Make the device that `halox::choose_device` picks for this rank (the one closest to its
  /// cpus, spread over the ranks of a node; see device.hpp) the calling thread's current CUDA
  /// device, with cudaSetDevice, while the context is built and before it creates any CUDA
  /// resource. false: $HALOX_SELECT_DEVICE=1 turns it on. Off by default: the current device is
  /// the caller's choice, and halox never changes it unless asked. Needs a CUDA build and a
  /// visible device on every rank, else building the context throws `halox::error`
  /// (errc::unsupported) on every rank.
  bool select_device = false;
  /// Fragment size, in bytes, of the `mpi_pipeline` backend: a message longer than this travels
  /// as fragments of this size (rounded down to whole elements), each packed, sent, received
  /// and unpacked on its own, so that packing one overlaps moving another. 0:
  /// $HALOX_PIPELINE_FRAGMENT when set, else automatic: messages of 128 KiB or more in about 8
  /// fragments of at least 64 KiB. Must be the same on every rank (building the context checks it).
  /// Smaller fragments overlap more and cost more messages; see docs/autotune.md.
  std::size_t pipeline_fragment_bytes = 0;
};

namespace detail {
struct context_state; // what a context holds, shared by its plans (internal)
} // namespace detail

/// Transport resources shared by every plan built from one communicator.
///
/// A context holds a duplicate of the caller's communicator (with `MPI_ERRORS_RETURN`, so an MPI
/// failure becomes a `halox::error` naming the call), the NCCL communicator of device plans
/// (created once, by the first plan that needs it), the allocator plans draw their memory from,
/// and the counter that gives each plan its own message tag so that plans sharing the
/// communicator never match each other's messages. Copies share the same resources (it is a
/// reference-counted handle); plans keep their context alive.
///
/// Plans built without a context use the default context of their communicator
/// (`context::of`), so by default all plans of one process grid share one set of resources.
///
/// Building a context is collective over the communicator, and so is building a plan from it:
/// every rank must build the plans of one context in the same order.
class context {
public:
  /// Collective over `comm`: duplicates it. `comm` must not be MPI_COMM_NULL.
  explicit context(MPI_Comm comm, context_options const& options = {});

  /// Collective over `comm` on first use. The default context of `comm`, created on first use
  /// and cached on the communicator (an MPI attribute), so every call with the same
  /// communicator returns the same resources until the communicator is freed.
  [[nodiscard]] static context of(MPI_Comm comm);

  /// The context's private communicator (a duplicate of the one it was built from).
  [[nodiscard]] MPI_Comm comm() const noexcept;
  /// Calling process's rank in `comm()`.
  [[nodiscard]] int rank() const noexcept;
  /// Number of processes.
  [[nodiscard]] int size() const noexcept;
  /// Number of plans built from this context so far (each takes one message tag).
  [[nodiscard]] std::size_t plans_built() const noexcept;
  /// Effective wait bound in seconds (0: unbounded).
  [[nodiscard]] double timeout_seconds() const noexcept;
  /// True when plans of the context agree on every execution (see context_options).
  [[nodiscard]] bool check_execute() const noexcept;
  /// True when the NCCL communicator exists (a device plan with the `nccl` backend was built).
  [[nodiscard]] bool has_nccl() const noexcept;
  /// Bytes currently held by plans of this context, per memory kind (allocated through the
  /// context's allocator, or halox's own when none was given).
  [[nodiscard]] std::size_t bytes_in_use(memory_kind kind) const noexcept;
  /// Device made current at construction (`context_options::select_device`), or -1 when the
  /// context left the current device alone.
  [[nodiscard]] int selected_device() const noexcept;
  /// One line: communicator size, plans built, memory in use, NCCL state, selected device.
  [[nodiscard]] std::string describe() const;

  /// True when both handles share the same resources.
  friend bool operator==(context const& a, context const& b) noexcept {
    return a.state_ == b.state_;
  }
  /// True when the handles hold different resources.
  friend bool operator!=(context const& a, context const& b) noexcept { return !(a == b); }

  /// The shared state (internal use by plans).
  [[nodiscard]] std::shared_ptr<detail::context_state> const& shared_state() const noexcept {
    return state_;
  }

private:
  explicit context(std::shared_ptr<detail::context_state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<detail::context_state> state_;
};

/// Scratch memory a plan needs while executing, per kind of memory.
struct workspace_size {
  std::size_t host = 0;        ///< ordinary host memory
  std::size_t pinned_host = 0; ///< page-locked host memory
  std::size_t device = 0;      ///< device memory
};

/// Caller-owned scratch memory handed to a plan (see `halo_options::external_workspace`). Each
/// area must hold at least the matching `workspace_size` entry and start on a 64-byte boundary;
/// it must stay valid, and not be used by anything else, until the exchange that uses it ends.
struct workspace {
  void* host = nullptr;              ///< host area
  std::size_t host_bytes = 0;        ///< its size
  void* pinned_host = nullptr;       ///< page-locked host area
  std::size_t pinned_host_bytes = 0; ///< its size
  void* device = nullptr;            ///< device area
  std::size_t device_bytes = 0;      ///< its size
};

} // namespace halox
