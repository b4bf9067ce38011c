#pragma once
// What every plan shares: its context and message tag, the forward schedule, the executors for
// both directions (built at plan time), the workspace, the backend selection and the start/wait
// state machine.

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

  /// Begins an exchange (forward, or reverse combining with `op`). While the online re-check
  /// runs, forward exchanges alternate between the chosen backend's executor and the
  /// runner-up's (both built at plan time) and are timed.
  void start(void* const* bufs, bool reverse, combine_op op, void* stream);
  /// Completes the exchange in flight. The wait of the last re-checked forward exchange takes
  /// the re-check's decision: one bounded all-reduce of the timings, then every rank keeps the
  /// same backend. Allocates nothing. When the exchange fails (a timeout, a peer's failure
  /// notice, an MPI error) the plan cannot run again: messages of that execution may still be
  /// queued and would be taken for the next one's.
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

  [[nodiscard]] backend selected() const noexcept { return selected_; }
  [[nodiscard]] schedule const& forward() const noexcept { return forward_; }
  [[nodiscard]] context const& ctx() const noexcept { return ctx_; }
  [[nodiscard]] int tag() const noexcept { return cfg_.tag; }
  [[nodiscard]] memory_space memory() const noexcept { return cfg_.memory; }
  [[nodiscard]] std::string const& selection_report() const noexcept { return report_; }
  /// Peers, bytes, regions, backend, workspace.
  [[nodiscard]] std::string summary() const;

  /// Forward executions the online re-check times: the first pair is a warm-up (first use of
  /// the caller's buffers), then the chosen backend and the runner-up alternate.
  static constexpr int recheck_executions = 10;
  /// Fraction by which the runner-up's median must beat the chosen backend's to switch.
  static constexpr double recheck_margin = 0.05;
  /// Forward executions whose median the watch compares (the last ones before each check).
  static constexpr int watch_window = 16;
  /// Executions between the watch's first checks; doubled after each quiet check, up to
  /// watch_max_period, back to watch_window after a re-check.
  static constexpr int watch_max_period = 1024;
  /// Fraction by which the choice's median must exceed the runner-up's last known median for
  /// the watch to start a re-check.
  static constexpr double watch_margin = 0.25;

private:
  void agree_execute_round(int direction, std::exception_ptr const& local);
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
  /// Waits for `e`; a failure marks the plan unusable.
  void finish(executor* e, void* stream);
  void recheck_decide();
  void watch_decide();
  [[nodiscard]] std::string recheck_summary() const;
  [[nodiscard]] double exec_skew(backend b, double fallback_skew) const;

  // The online re-check of an automatic choice and the watch that follows it (see
  // docs/autotune.md). Only numbers: deciding allocates nothing.
  struct recheck_state {
    enum class phase { none, pending, watching };
    enum class outcome { none, confirmed, switched };
    phase state = phase::none;
    backend other = backend::automatic; ///< the runner-up (after a switch: the old choice)
    bool force = false;                 ///< the next re-check switches whatever the times say
    bool timing = false;                ///< the exchange in flight is timed
    bool watch = false;                 ///< watch after the re-check (or instead of one)
    int done = 0;                       ///< forward exchanges of the running re-check so far
    long long executions = 0;           ///< forward exchanges since the plan was built
    double spent = 0.0;                 ///< seconds spent in start of the exchange in flight
    std::array<double, recheck_executions> times{};
    outcome last = outcome::none;   ///< how the latest re-check ended
    bool by_watch = false;          ///< the latest (or running) re-check was started by the watch
    double medians[2] = {0.0, 0.0}; ///< chosen, runner-up (at the latest re-check's decision)
    std::string reason;             ///< why there is (no) first re-check
    std::string watch_reason;       ///< why there is no watch
    // The watch: the latest forward times (a ring), when to check next, and what it found.
    std::array<double, watch_window> recent{};
    int filled = 0, since = 0, period = watch_window;
    double runner_ref = 0.0;    ///< the runner-up's latest median (tuning, or a re-check)
    int checks = 0, drifts = 0; ///< checks made; re-checks they started
    double drift_median = 0.0;  ///< the choice's median at the check that started a re-check
    double drift_ref = 0.0;     ///< the runner-up's median it was compared with
  };

  context ctx_;
  bool check_ = false;
  schedule forward_;
  exec_config cfg_;
  backend selected_ = backend::mpi_pack;
  std::string report_;
  bool external_ = false;
  workspace_memory own_;        // before the executors: they are destroyed first
  peer_watch watch_;            // likewise: the executors test it while waiting
  std::int64_t executions_ = 0; // executions begun (or refused) on this rank
  std::string broken_;          // why the plan cannot run again (empty: it can)
  std::int64_t failed_at_ = -1; // this rank's refused execution, for settle_failure
  std::vector<int> failed_peers_;
  std::string failed_why_;
  std::unique_ptr<executor> fwd_, rev_;
  std::unique_ptr<executor> alt_fwd_, alt_rev_; // the runner-up's, while/after re-checking
  executor* active_ = nullptr;
  recheck_state rc_;
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
