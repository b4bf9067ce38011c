#pragma once
/// \file halo.hpp
/// Halo-exchange plans: built once from one or more descriptors, executed many times on caller
/// memory, forward (owners -> halos) or reverse (halos -> owners, combined).

#include <halox/backend.hpp>
#include <halox/context.hpp>
#include <halox/tensor_view.hpp>
#include <halox/tune.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halox {

/// What a halo exchange does with halo cells beyond a non-periodic global boundary.
enum class boundary_fill {
  untouched, ///< leave them as they are
  constant   ///< set them to `halo_options::fill_value` (zero padding for convolutions)
};

/// Options of a halo-exchange plan. Every rank must pass the same options.
struct halo_options {
  backend method = backend::automatic;      ///< how to move data ($HALOX_BACKEND overrides auto)
  memory_space memory = memory_space::host; ///< where the buffers live
  boundary_fill boundary = boundary_fill::untouched; ///< non-periodic boundary halo cells
  double fill_value = 0.0;                           ///< value for boundary_fill::constant
  tune_options tune;                                 ///< automatic selection settings
  /// When true the plan allocates no workspace: the caller passes one with `set_workspace`
  /// (at least `workspace_bytes()`) before executing, e.g. from a framework's caching
  /// allocator. When false the plan draws it from its context's allocator at construction.
  bool external_workspace = false;
  /// Bound on this plan's waits in seconds (unset: the context's; 0: unbounded; see
  /// context_options).
  std::optional<double> timeout_seconds;
  /// Agree with every rank before each execution (false: the context's; see context_options).
  bool check_execute = false;
};

/// Opaque stream handle: a `cudaStream_t` for device plans, ignored for host plans.
using stream_handle = void*;

/// A halo exchange of one or several tensors (all on congruent communicators), merged into one
/// round of messages: for every peer, the regions of all tensors travel in one message.
///
/// Construction is collective over the tensors' grid communicator. The plan's messages travel
/// on its context's private communicator under a tag of its own, so they never match the
/// caller's messages nor another plan's. Everything collective (backend selection, topologies,
/// the NCCL communicator, both directions' executors) happens here; execution only posts and
/// completes messages. Execution is collective too: every rank of the grid must call
/// `start`/`wait` (or `execute`) in the same order. Nothing is allocated on the execution path.
/// Destroying a plan while an exchange is in flight completes or cancels its messages first.
class halo_plan {
public:
  /// Plans the exchange of one tensor, on the default context of its grid's communicator.
  explicit halo_plan(tensor_desc const& t, halo_options const& options = {});
  /// Plans the exchange of several tensors in one round of messages.
  explicit halo_plan(std::vector<tensor_desc> const& tensors, halo_options const& options = {});
  /// Plans the exchange of one tensor on `ctx`, which must hold the grid's processes in the
  /// grid's rank order (e.g. built from the same communicator the grid was built from).
  halo_plan(context const& ctx, tensor_desc const& t, halo_options const& options = {});
  /// Plans the exchange of several tensors on `ctx`.
  halo_plan(context const& ctx, std::vector<tensor_desc> const& tensors,
            halo_options const& options = {});
  /// Ends the plan on this rank (not collective): an exchange in flight is completed or
  /// cancelled first, and the plan's peers are told this rank left it, so one that executes it
  /// again raises errc::peer_failed instead of waiting.
  ~halo_plan();
  /// Moves the plan; the moved-from plan may only be destroyed or assigned to.
  halo_plan(halo_plan&&) noexcept;
  /// Moves a plan into this one, ending the plan this one held first.
  halo_plan& operator=(halo_plan&&) noexcept;

  /// Forward exchange (start + wait) of one tensor.
  void execute(tensor_view const& v, stream_handle stream = nullptr);
  /// Forward exchange of all tensors, in the order they were planned.
  void execute(std::vector<tensor_view> const& vs, stream_handle stream = nullptr);
  /// Begins a forward exchange; owned cells may be read but not written, and halo cells not
  /// touched, until `wait`.
  void start(tensor_view const& v, stream_handle stream = nullptr);
  /// Begins a forward exchange of all tensors.
  void start(std::vector<tensor_view> const& vs, stream_handle stream = nullptr);
  /// Completes the exchange begun by `start` or `start_reverse`.
  void wait(stream_handle stream = nullptr);

  /// Reverse exchange (start_reverse + wait): every halo cell's value is sent to the owner of
  /// that cell and combined into it with `op` (sum for gradients). Halo cells keep their values.
  void execute_reverse(tensor_view const& v, reduce_op op = reduce_op::sum,
                       stream_handle stream = nullptr);
  /// Reverse exchange of all tensors.
  void execute_reverse(std::vector<tensor_view> const& vs, reduce_op op = reduce_op::sum,
                       stream_handle stream = nullptr);
  /// Begins a reverse exchange.
  void start_reverse(std::vector<tensor_view> const& vs, reduce_op op = reduce_op::sum,
                     stream_handle stream = nullptr);

  /// This rank will not run the plan's next forward (or `reverse`) exchange, because of `reason`
  /// (for wrappers that check their inputs themselves and find them wrong, or that switch to
  /// another plan). The exchange counts as executed and refused here: the peers that wait in
  /// it for this rank raise errc::peer_failed naming `reason` at once, as after a failed
  /// execute-time check. Returns true when every peer of the exchange skipped it too (the
  /// ranks changed course together: nothing was sent and the plan runs on), false when a peer
  /// went ahead with it (it has been told; this plan cannot run again). Waits for the peers'
  /// answers at most the plan's timeout.
  [[nodiscard]] bool skip_execution(std::string const& reason, bool reverse = false);

  /// Scratch memory the plan uses while executing (pack buffers, landing areas, staging).
  [[nodiscard]] workspace_size workspace_bytes() const noexcept;
  /// Hands the plan a caller-owned workspace (needed once before executing a plan built with
  /// `external_workspace`; may be called again between exchanges, e.g. with a new allocation
  /// every step). Throws `halox::error` when an area is too small, null or misaligned, or an
  /// exchange is in flight.
  void set_workspace(workspace const& w);
  /// The context the plan was built on.
  [[nodiscard]] context const& get_context() const noexcept;

  /// The backend in use (the measured winner when `automatic` was requested).
  [[nodiscard]] backend selected_backend() const noexcept;
  /// Number of tensors exchanged.
  [[nodiscard]] int num_tensors() const noexcept;
  /// Bytes this rank sends per forward exchange (local copies excluded).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Bytes this rank receives per forward exchange (local copies excluded).
  [[nodiscard]] std::size_t bytes_received() const noexcept;
  /// Number of peers this rank exchanges messages with.
  [[nodiscard]] int num_peers() const noexcept;
  /// Human-readable account: tensors, peers, bytes, regions, the chosen backend and, after
  /// automatic selection, the measured time of every candidate.
  [[nodiscard]] std::string describe() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace halox
