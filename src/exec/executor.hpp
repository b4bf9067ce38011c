#pragma once
// The internal backend interface: an executor moves one schedule's data, at whole-plan
// granularity. It knows nothing about halos or distributions.
//
// Every executor follows one skeleton: `start` records the buffers and calls `post` (pack and
// post the messages); `wait` calls `complete` (finish the messages, unpack, local copies,
// fills). Scratch memory is never allocated by an executor: it reserves areas of the plan's
// workspace at construction and finds them at `bind_workspace`'s addresses while executing.
//
// Every wait of an exchange is bounded by the plan's timeout and interrupted by its peers'
// failure notices. Those waits live in the executor's wait context (exec/wait_context.hpp),
// which it hands to its transport: the transport completes its own requests under the same
// bounds and never calls the executor back.

#include "exec/combine.hpp"
#include "exec/context_state.hpp"
#include "exec/exec_config.hpp"
#include "exec/wait_context.hpp"
#include "exec/workspace_layout.hpp"
#include "plan/schedule.hpp"

#include <halox/backend.hpp>

#include <mpi.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace halox::detail {

/// Memory behind a workspace, drawn from a context (plan-owned workspace, tuning trials).
class workspace_memory {
public:
  /// Allocates (at least) `bytes[k]` of each kind from `ctx`, keeping blocks already big enough.
  void reserve(std::shared_ptr<context_state> const& ctx, std::array<std::size_t, 3> const& bytes);
  /// Base addresses to bind.
  [[nodiscard]] workspace_bases bases() const noexcept;
  /// Keeps the memory for the rest of the process (see memory_block::orphan).
  void orphan() noexcept;

private:
  std::array<memory_block, 3> blocks_;
};

/// Runs one schedule. Resources (requests, datatypes, topologies, events) are created in the
/// constructor, so `start`/`wait` allocate nothing.
class executor {
public:
  /// Runs `s` as backend `kind` (named in the errors of its waits).
  executor(schedule s, exec_config cfg, backend kind)
      : sched_(std::move(s)), cfg_(std::move(cfg)), waits_(cfg_, kind) {}
  virtual ~executor() = default;
  executor(executor const&) = delete;
  executor& operator=(executor const&) = delete;

  /// Begins the exchange on the slot buffers `bufs` (valid until `wait` returns); received
  /// values are combined with `op`. `stream` is a cudaStream_t for device backends (ignored on
  /// the host). The workspace must be bound.
  void start(void* const* bufs, combine_op op, void* stream, bool reverse = false);
  /// Completes it: after return (host) or after the stream reaches this point (device), every
  /// received region, local copy and fill is in place.
  void wait(void* stream);
  /// For an exchange that will never be waited for (its plan is destroyed, or an exception
  /// unwinds past it): gives the messages a grace period to complete, then cancels what is
  /// still pending. Returns false when a request could be neither completed nor cancelled;
  /// the workspace must then stay allocated (MPI may still access it).
  [[nodiscard]] bool abandon(double grace = 1.0) noexcept;
  /// True between `start` and the end of `wait`.
  [[nodiscard]] bool in_flight() const noexcept { return in_flight_; }

  /// Workspace bytes per kind of memory this executor needs.
  [[nodiscard]] std::size_t workspace_bytes(memory_kind k) const noexcept {
    return layout_.bytes(k);
  }
  /// All three kinds, indexed by memory_kind.
  [[nodiscard]] std::array<std::size_t, 3> workspace_needs() const noexcept {
    return {layout_.bytes(memory_kind::host), layout_.bytes(memory_kind::pinned_host),
            layout_.bytes(memory_kind::device)};
  }
  /// Makes the executor use the workspace at `bases` (each at least `workspace_bytes` of its
  /// kind). Cheap when the addresses did not change.
  void bind_workspace(workspace_bases const& bases);
  /// Forgets the bound workspace before its memory is released (the autotuner's, once timing
  /// is over): `start` refuses to run until `bind_workspace` is called again.
  void unbind_workspace() noexcept { bound_ = false; }

  /// Makes the transport as fast on the first exchange as on the hundredth: connects and warms
  /// the paths to the schedule's peers (a transport that wires its endpoints lazily, UCX,
  /// otherwise runs its first exchanges many times slower). Collective over the schedule's
  /// peers: call on every rank, after every rank has built its executor, with nothing in flight.
  /// Needs no workspace and touches no caller memory. The default does nothing.
  virtual void warm_up() {}

  /// The backend this executor implements.
  [[nodiscard]] virtual backend kind() const noexcept = 0;
  /// How this executor's messages travel when that is more than "one per peer" (for
  /// describe()), e.g. "2 of 4 message(s) sent in 17 fragment(s)"; empty otherwise.
  [[nodiscard]] virtual std::string wire_summary() const { return {}; }
  /// How the backend is being kept, for describe(), starting with "; " (an adaptive executor's
  /// re-check and watch, see tune/tuned_executor.hpp); empty for a fixed backend.
  [[nodiscard]] virtual std::string choice_summary() const { return {}; }
  /// The schedule it runs.
  [[nodiscard]] schedule const& sched() const noexcept { return sched_; }
  /// True when every rank of the communicator takes part in each exchange (a nonblocking
  /// collective), not only the schedule's peers: a rank that will not take part must tell all.
  [[nodiscard]] bool whole_communicator() const noexcept { return collective_requests(); }

protected:
  /// Packs and posts the messages of the exchange on `bufs_` with `op_`.
  virtual void post(void* stream) = 0;
  /// Completes the messages and every unpack, local copy and fill.
  virtual void complete(void* stream) = 0;
  /// Called when the workspace moved (persistent requests are rebuilt here).
  virtual void on_bind() {}
  /// True when the requests are of a nonblocking collective (they cannot be cancelled).
  [[nodiscard]] virtual bool collective_requests() const noexcept { return false; }
  /// Finishes or cancels whatever the exchange in flight still has pending, for `abandon`:
  /// waits up to `grace` seconds for completion, then cancels. Returns false when something
  /// could be neither completed nor cancelled. The default works on `reqs_` (MPI requests); an
  /// executor that drives a transport hands it to the transport.
  [[nodiscard]] virtual bool abandon_requests(double grace) noexcept;

  /// Cancels the receives from `peer` (a failed rank), for `wait`; the default works on
  /// `reqs_`, an executor that drives a transport hands it to the transport.
  virtual void cancel_peer(int peer) noexcept;

  /// The bounded waits of this executor's exchanges, shared with its transport; name the
  /// requests there at construction (for `reqs_`: one entry per `reqs_` entry).
  [[nodiscard]] wait_context& waits() noexcept { return waits_; }
  /// Completes `reqs_[first, first + n)` (wait_context::wait_all).
  void wait_all(std::size_t first, std::size_t n) { waits_.wait_all(reqs_.data(), first, n); }

  /// The reservations so far (a transport adds its own at construction).
  workspace_layout& layout() noexcept { return layout_; }
  /// The bound workspace's base addresses.
  [[nodiscard]] workspace_bases const& bases() const noexcept { return ws_; }
  /// Reserves a workspace area at construction; returns its offset.
  std::size_t reserve(memory_kind k, std::size_t bytes) { return layout_.reserve(k, bytes); }
  /// Address of a reserved area of the bound workspace.
  [[nodiscard]] std::byte* ws(memory_kind k, std::size_t offset) const noexcept {
    return ws_[static_cast<int>(k)] + offset;
  }

  schedule sched_;
  exec_config cfg_;
  /// The requests of the executor's own exchange in flight (a collective's), so that `abandon`
  /// can find them; MPI_REQUEST_NULL when inactive. A transport keeps its own.
  std::vector<MPI_Request> reqs_;
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;

private:
  /// Before any transport the derived executor makes, which waits through it until destroyed.
  wait_context waits_;
  workspace_layout layout_;
  workspace_bases ws_{};
  bool bound_ = false;
  bool in_flight_ = false;
};

/// An executor on host memory: local copies through a host scratch area and fills run in
/// `complete` around the backend's `receive`, while messages are in flight.
class host_executor : public executor {
public:
  host_executor(schedule s, exec_config cfg, backend kind);

protected:
  void complete(void* stream) final;
  /// Completes the messages and unpacks the received ones.
  virtual void receive() = 0;

private:
  std::size_t scratch_ = 0;
};

/// Builds the executor for `b` (not `automatic`); throws `halox::error` (unsupported) when the
/// backend does not exist in this build or does not fit the memory space.
[[nodiscard]] std::unique_ptr<executor> make_executor(backend b, schedule const& s,
                                                      exec_config const& cfg);

/// True when `b` can run on buffers in `mem` in this build.
[[nodiscard]] bool backend_available(backend b, memory_space mem) noexcept;

} // namespace halox::detail
