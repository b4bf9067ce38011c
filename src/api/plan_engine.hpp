#pragma once
// What every plan shares: its context and message tag, the forward schedule, one executor per
// direction (built at plan time; the tuner's for an automatic choice), the workspace and the
// start/wait state machine with its failure handling.

#include "exec/executor.hpp"
#include "tune/select.hpp"

#include <halox/context.hpp>
#include <halox/halo.hpp>

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halox::detail {

/// Settings a plan passes to the engine.
struct engine_options {
  backend method = backend::automatic;
  memory_space memory = memory_space::host;
  double fill_value = 0.0;
  tune_options tune;
  bool external_workspace = false; ///< the caller binds the workspace with set_workspace
  std::optional<double> timeout;   ///< unset: the context's; 0: unbounded
  bool check_execute = false;      ///< or the context's
  char const* label = "plan";      ///< the public plan type, for messages
};

class plan_engine {
public:
  /// Collective over `ctx`'s communicator: takes the plan's message tag, selects the backend
  /// and builds the forward and reverse executors and (unless external) the workspace. `key`
  /// is the geometry hash used by the plan cache.
  plan_engine(context const& ctx, schedule forward, engine_options const& o, std::uint64_t key);
  /// Abandons an exchange still in flight (see executor::abandon) before releasing anything.
  ~plan_engine();
  plan_engine(plan_engine const&) = delete;
  plan_engine& operator=(plan_engine const&) = delete;

  /// Runs `validate` (the caller's checks of the buffers and state of one execution). With
  /// execute-time checking on, every rank then agrees, in one bounded all-reduce, that all
  /// ranks' buffers are valid and that all execute this plan in the same direction (0 forward,
  /// 1 reverse/inverse): otherwise every rank throws. Off, `validate` runs alone, nothing is
  /// allocated, and when it throws this rank first sends a failure notice to the peers of the
  /// execution (they raise errc::peer_failed instead of waiting for it). Either way a plan that
  /// cannot run again (see `wait`) refuses here.
  template <class Validate> void agree_execute(int direction, Validate&& validate) {
    std::int64_t const n = executions_++;
    if (!check_) {
      try {
        settle_failure();
        refuse_if_broken();
        validate();
      } catch (...) {
        tell_peers(n, direction, std::current_exception(), false);
        throw;
      }
      return;
    }
    std::exception_ptr local;
    try {
      refuse_if_broken();
      validate();
    } catch (...) {
      local = std::current_exception();
    }
    agree_execute_round(direction, local);
  }

  /// This rank will not take part in its next execution in `direction`, because of `reason`:
  /// counted as one, and announced as a refused one (a failure notice to its peers, which
  /// raise errc::peer_failed if they went ahead). Returns true when every peer of the execution
  /// skipped it too (then no message of it exists and the plan runs on), false when one went
  /// ahead (then the plan cannot run again). Waits for the peers' answers at most the plan's
  /// timeout. With execute-time checking, the execute-time all-reduce carries the answer.
  [[nodiscard]] bool skip(int direction, std::string const& reason);

  /// This rank leaves the plan (`why`: "destroyed the plan", "finalised MPI"): its peers get a
  /// departure notice, so that one waiting in the execution in flight here or in any later one
  /// raises errc::peer_failed at once instead of running into the watchdog. Once; nothing
  /// when MPI is down. The destructor calls it, and so does MPI_Finalize for every plan still
  /// alive then.
  void depart(char const* why) noexcept;
  /// At MPI_Finalize, after depart: leaves the receives of the peers' departures to the
  /// context's notice channel, which it returns (the caller waits for them there).
  notice_channel* retire_at_finalize() noexcept;

  /// Begins an exchange (forward, or reverse combining with `op`) on the executor of that
  /// direction (an automatic choice's is the tuner's, see tune/tuned_executor.hpp).
  void start(void* const* bufs, bool reverse, combine_op op, void* stream);
  /// Completes the exchange in flight. Allocates nothing. When the exchange fails (a timeout, a
  /// peer's failure notice, an MPI error) the plan cannot run again: messages of that execution may
  /// still be queued and would be taken for the next one's.
  void wait(void* stream);
  /// Abandons the exchange in flight, if any (see executor::abandon); returns false when its
  /// messages could be neither completed nor cancelled (the engine's own workspace is then kept
  /// for the rest of the process; a caller's must be too).
  [[nodiscard]] bool abandon() noexcept;
  /// True between start and the end of wait.
  [[nodiscard]] bool in_flight() const noexcept { return active_ != nullptr; }

  /// Workspace the executors need (the larger of both directions, per kind).
  [[nodiscard]] workspace_size workspace_bytes() const noexcept;
  /// Binds a caller workspace (checked against workspace_bytes); not while in flight.
  void set_workspace(workspace const& w);

  /// The backend running now (an automatic choice may switch after its re-check).
  [[nodiscard]] backend selected() const noexcept { return fwd_->kind(); }
  [[nodiscard]] schedule const& forward() const noexcept { return forward_; }
  [[nodiscard]] context const& ctx() const noexcept { return ctx_; }
  [[nodiscard]] int tag() const noexcept { return cfg_.tag; }
  [[nodiscard]] memory_space memory() const noexcept { return cfg_.memory; }
  [[nodiscard]] std::string const& selection_report() const noexcept { return report_; }
  /// Peers, bytes, regions, backend, workspace.
  [[nodiscard]] std::string summary() const;

private:
  void agree_execute_round(int direction, std::exception_ptr const& local);
  /// The ranks an execution exchanges with: every other rank under a collective backend.
  [[nodiscard]] std::vector<int> execution_peers() const;
  /// Throws invalid_state when an earlier execution failed in a way that leaves messages out of
  /// step (see `wait`).
  void refuse_if_broken() const;
  /// This rank will not take part in execution `n`, because of `why`: sends the failure notice
  /// to the peers of the execution (none: nothing to tell, the plan stays usable). When this
  /// rank `posted` messages of it, the plan cannot run again; otherwise `settle_failure` decides
  /// at the next execution. Never throws.
  void tell_peers(std::int64_t n, int direction, std::exception_ptr const& why,
                  bool posted) noexcept;
  /// After this rank refused an execution before posting anything: when every peer of it
  /// refused it too (their notices arrive within seconds), no message of it was sent and the
  /// plan runs on; otherwise a peer went ahead and the plan cannot run again.
  void settle_failure();
  /// settle_failure's wait for the peers' answers, at most `seconds`; true when every peer
  /// refused the execution (or nothing was pending).
  bool settle_within(double seconds);
  /// Waits for `e`; a failure marks the plan unusable.
  void finish(executor* e, void* stream);
  context ctx_;
  bool check_ = false;
  schedule forward_;
  exec_config cfg_;
  std::string report_;
  std::string choice_note_; // why an automatic choice is not re-checked or watched, if so
  bool external_ = false;
  workspace_memory own_;        // before the executors: they are destroyed first
  peer_watch watch_;            // likewise: the executors test it while waiting
  std::int64_t executions_ = 0; // executions begun (or refused) on this rank
  std::string broken_;          // why the plan cannot run again (empty: it can)
  std::int64_t failed_at_ = -1; // this rank's refused execution, for settle_failure
  std::vector<int> failed_peers_;
  std::string failed_why_;
  std::unique_ptr<executor> fwd_, rev_;
  executor* active_ = nullptr;
  bool departed_ = false;
  std::int64_t plan_id_ = 0; // notice_message::plan
};

/// Converts the public reduction to the internal combine op.
[[nodiscard]] combine_op to_combine(reduce_op op) noexcept;

/// Throws `halox::error` (invalid_argument) when a plan's `timeout_seconds` (of `options`,
/// for the message) is set and negative.
void require_timeout(std::optional<double> const& seconds, char const* options);

/// Throws unless `ctx` holds the same processes in the same order as `comm` (collective
/// validation helper; call inside collective_check).
void require_context_matches(context const& ctx, MPI_Comm comm, char const* what);

} // namespace halox::detail
