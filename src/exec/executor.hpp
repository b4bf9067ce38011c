#pragma once
// The internal backend interface: an executor moves one schedule's data, at whole-plan
// granularity. It knows nothing about halos or distributions.
//
// Every executor follows one skeleton: `start` records the buffers and calls `post` (pack and
// post the messages); `wait` calls `complete` (finish the messages, unpack, local copies,
// fills). Scratch memory is never allocated by an executor: it reserves areas of the plan's
// workspace at construction and finds them at `bind_workspace`'s addresses while executing.

#include "common/agreement.hpp"
#include "exec/combine.hpp"
#include "exec/context_state.hpp"
#include "plan/schedule.hpp"

#include <halox/backend.hpp>

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace halox::detail {

/// What every executor is built from.
struct exec_config {
  std::shared_ptr<context_state> ctx; ///< the plan's context (communicator, allocator, NCCL)
  MPI_Comm comm = MPI_COMM_NULL;      ///< the communicator messages travel on (ctx->comm)
  int tag = 0;                        ///< the plan's message tag on it
  memory_space memory = memory_space::host;
  double fill_value = 0.0;    ///< value for the schedule's fill regions
  double timeout = 0.0;       ///< seconds a wait may last before it throws (0: unbounded)
  char const* label = "plan"; ///< what the plan is, for error messages ("halo_plan", ...)
  /// The plan's watch for peers' failure notices, tested by every wait loop (null: none).
  peer_watch* watch = nullptr;
};

/// What one request of an exchange moves, for the watchdog's report.
struct request_info {
  int peer = -1;         ///< rank in the plan's communicator (-1: a collective over all)
  std::size_t bytes = 0; ///< bytes it moves
  bool recv = true;      ///< a receive (or a collective's incoming half)
};

/// Offsets of the areas an executor reserved in a workspace, per kind of memory.
class workspace_layout {
public:
  /// Reserves `bytes` of `kind` (64-byte aligned) and returns its offset. Every area, even an
  /// empty one, gets an address of its own: MPI libraries take a collective's send buffer equal
  /// to its receive buffer for MPI_IN_PLACE (Open MPI's libnbc does).
  std::size_t reserve(memory_kind kind, std::size_t bytes) {
    auto& end = end_[static_cast<int>(kind)];
    std::size_t const at = end;
    end += bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    return at;
  }
  /// Bytes of `kind` the reservations need.
  [[nodiscard]] std::size_t bytes(memory_kind kind) const noexcept {
    return end_[static_cast<int>(kind)];
  }

private:
  std::array<std::size_t, 3> end_{};
};

/// Base addresses of a bound workspace, per kind of memory.
using workspace_bases = std::array<std::byte*, 3>;

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
  executor(schedule s, exec_config cfg) : sched_(std::move(s)), cfg_(std::move(cfg)) {}
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

  // Bounded waits, for the executor and the transport it drives (exec/transport.hpp). Requests
  // are numbered as `info_`: an exchange's receives first, then its sends.

  /// Completes MPI requests `reqs[first, first + n)` within the plan's timeout when it has one
  /// (each request then needs its `info_` entry, which names it in the error), and raises
  /// errc::peer_failed when a peer's failure notice arrives meanwhile. `reqs` is indexed like
  /// `info_`.
  void wait_all(MPI_Request* reqs, std::size_t first, std::size_t n);
  /// Completes one of `reqs[first, first + n)` not yet returned by this exchange and returns its
  /// index (relative to first), within the timeout; MPI_UNDEFINED when none is left. Failure
  /// notices as in `wait_all`.
  int wait_any(MPI_Request* reqs, std::size_t first, std::size_t n);
  /// Polls the plan's failure notices (throws errc::peer_failed when a peer failed).
  void poll_watch();
  /// True when a wait must poll (the plan has a timeout or a failure watch).
  [[nodiscard]] bool waits_polled() const noexcept {
    return cfg_.timeout > 0 || cfg_.watch != nullptr;
  }
  /// Seconds a wait may last (0: unbounded).
  [[nodiscard]] double timeout() const noexcept { return cfg_.timeout; }
  /// Per request: completed in this exchange (cleared by `start`).
  [[nodiscard]] char* done_flags() noexcept { return done_.data(); }
  /// What request `i` moves.
  [[nodiscard]] request_info const& request(std::size_t i) const { return info_[i]; }
  /// Throws `halox::error` (errc::timeout) naming the plan, its tag, the backend and the
  /// requests of [first, first + n) not done, with the bytes they still move.
  [[noreturn]] void throw_timeout(std::size_t first, std::size_t n);
  /// Cancels the receives among `reqs[0, n)` from `peer` (a failed rank), marking them done.
  void cancel_receives(MPI_Request* reqs, std::size_t n, int peer) noexcept;
  /// Waits up to `grace` seconds for `reqs` to complete, then cancels them when `cancellable`
  /// (a nonblocking collective is not); false when some could be neither completed nor cancelled.
  [[nodiscard]] static bool abandon_mpi(std::vector<MPI_Request>& reqs, double grace,
                                        bool cancellable) noexcept;
  /// The configuration the executor was built with.
  [[nodiscard]] exec_config const& config() const noexcept { return cfg_; }

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
  /// could be neither completed nor cancelled. The default works on `reqs_` (MPI requests); a
  /// backend with its own requests (UCX) overrides it.
  [[nodiscard]] virtual bool abandon_requests(double grace) noexcept;

  /// Cancels the receives of `info_` from `peer` (a failed rank), for `wait`; the default
  /// works on `reqs_`, a backend with its own requests (UCX) overrides it.
  virtual void cancel_peer(int peer) noexcept;

  /// `wait_all` / `wait_any` on `reqs_`.
  void wait_all(std::size_t first, std::size_t n) { wait_all(reqs_.data(), first, n); }
  int wait_any(std::size_t first, std::size_t n) { return wait_any(reqs_.data(), first, n); }
  /// Describes requests (index, what they move) for the watchdog: fill at construction, one
  /// entry per `reqs_` entry.
  std::vector<request_info> info_;

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
  /// The requests of the exchange in flight (receives first, then sends, by convention), so
  /// that `abandon` can find them; MPI_REQUEST_NULL when inactive.
  std::vector<MPI_Request> reqs_;
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
  /// Per request (one per `info_` / `reqs_` entry): completed in this exchange. Cleared by
  /// `start`; `wait_all`/`wait_any` keep it when the plan has a timeout, a backend with its own
  /// requests keeps it always.
  std::vector<char> done_;

  /// Marks in `done_` the requests of `reqs[first, first + n)` that completed (for the report).
  void settle(MPI_Request* reqs, std::size_t first, std::size_t n);

private:
  workspace_layout layout_;
  workspace_bases ws_{};
  bool reverse_ = false; // direction of the exchange in flight, for messages
  bool bound_ = false;
  bool in_flight_ = false;
};

/// An executor on host memory: local copies through a host scratch area and fills run in
/// `complete` around the backend's `receive`, while messages are in flight.
class host_executor : public executor {
public:
  host_executor(schedule s, exec_config cfg);

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

/// `n` as an MPI `int` count; throws `halox::error` (unsupported) naming `what` when it does not
/// fit, since the non-`_c` MPI calls cannot express it.
int mpi_int_count(std::size_t n, char const* what);

} // namespace halox::detail
