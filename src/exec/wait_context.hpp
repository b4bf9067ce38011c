#pragma once
// The wait context: what bounds and interrupts every wait of one executor's exchanges. An
// exchange must never hang on a peer that is gone, so each wait loop stops at the plan's timeout
// (with a report naming the requests still pending) and at a peer's failure notice
// (exec/peer_notice.hpp). Both the executor and the transport it drives wait that way; the
// executor owns the context and hands it to its transport at construction, so the transport
// completes its own requests (MPI requests it keeps, UCX handles, ...) without calling back
// into the executor.
//
// Requests are numbered as the transport's request table (exec/transport.hpp: an exchange's
// receives first, then its sends, then any control messages), or as the executor's own
// requests when it has no transport (a collective). Per request the context keeps what it
// moves (to name it in a timeout) and whether it completed in the exchange in flight.

#include "common/agreement.hpp"
#include "exec/exec_config.hpp"

#include <halox/backend.hpp>

#include <mpi.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace halox::detail {

/// What one request of an exchange moves, for the watchdog's report.
struct request_info {
  int peer = -1;         ///< rank in the plan's communicator (-1: a collective over all)
  std::size_t bytes = 0; ///< bytes it moves
  bool recv = true;      ///< a receive (or a collective's incoming half)
};

/// The bounded waits of one executor (one plan direction) and its transport.
class wait_context {
public:
  /// For the executor of backend `kind` (named in errors) built with `cfg`.
  wait_context(exec_config cfg, backend kind) : cfg_(std::move(cfg)), kind_(kind) {}
  wait_context(wait_context const&) = delete;
  wait_context& operator=(wait_context const&) = delete;

  /// The plan's configuration: its communicator, tag, context and timeout, for transports.
  [[nodiscard]] exec_config const& config() const noexcept { return cfg_; }
  /// The backend the waits belong to, for error messages.
  [[nodiscard]] backend kind() const noexcept { return kind_; }

  /// Names the requests of every exchange (at construction, once the transport's request table
  /// is known), and sizes their completion flags then, so that no exchange allocates.
  void name_requests(std::vector<request_info> info);
  /// An exchange in direction `reverse` begins: no request has completed.
  void begin(bool reverse) noexcept;
  /// Per request: completed in this exchange. `wait_all`/`wait_any` keep it when waits poll;
  /// a transport with requests of its own (UCX) keeps it always.
  [[nodiscard]] char* done_flags() noexcept { return done_.data(); }

  /// Completes MPI requests `reqs[first, first + n)` (indexed like the named requests) within
  /// the plan's timeout when it has one, and raises errc::peer_failed when a peer's failure
  /// notice arrives meanwhile.
  void wait_all(MPI_Request* reqs, std::size_t first, std::size_t n);
  /// Completes one of `reqs[first, first + n)` not yet returned by this exchange and returns its
  /// index (relative to first), within the timeout; MPI_UNDEFINED when none is left. Failure
  /// notices as in `wait_all`.
  int wait_any(MPI_Request* reqs, std::size_t first, std::size_t n);
  /// Polls the plan's failure notices (throws errc::peer_failed when a peer failed); for wait
  /// loops over requests that are not MPI's.
  void poll();
  /// When a wait beginning now must end (compare with `expired`).
  [[nodiscard]] clock_type::time_point deadline() const {
    return deadline_after(cfg_.timeout > 0 ? cfg_.timeout : 0.0);
  }
  /// True when the plan has a timeout and `until` (a `deadline`) has passed.
  [[nodiscard]] bool expired(clock_type::time_point until) const {
    return cfg_.timeout > 0 && clock_type::now() > until;
  }
  /// Throws `halox::error` (errc::timeout) naming the plan, its tag, the backend and the
  /// requests of [first, first + n) not done, with the bytes they still move.
  [[noreturn]] void throw_timeout(std::size_t first, std::size_t n);

  /// Cancels the receives among `reqs[0, n)` from `peer` (a failed rank), marking them done.
  void cancel_receives(MPI_Request* reqs, std::size_t n, int peer) noexcept;
  /// Waits up to `grace` seconds for `reqs` to complete, then cancels them when `cancellable`
  /// (a nonblocking collective is not); false when some could be neither completed nor cancelled.
  [[nodiscard]] static bool abandon_mpi(std::vector<MPI_Request>& reqs, double grace,
                                        bool cancellable) noexcept;

private:
  /// Marks in `done_` the requests of `reqs[first, first + n)` that completed (for the report).
  void settle(MPI_Request* reqs, std::size_t first, std::size_t n);

  exec_config cfg_;
  backend kind_;
  std::vector<request_info> info_;
  std::vector<char> done_;
  bool reverse_ = false; // direction of the exchange in flight, for messages
};

} // namespace halox::detail
