#pragma once
// What every plan shares: its context and message tag, the forward schedule, the executors for
// both directions (built at plan time), the workspace, the backend selection and the start/wait
// state machine.

#include "exec/executor.hpp"
#include "tune/select.hpp"

#include <halox/context.hpp>
#include <halox/halo.hpp>

#include <array>
#include <exception>
#include <memory>
#include <string>

namespace halox::detail {

/// Settings a plan passes to the engine.
struct engine_options {
  backend method = backend::automatic;
  memory_space memory = memory_space::host;
  double fill_value = 0.0;
  tune_options tune;
  bool external_workspace = false; ///< the caller binds the workspace with set_workspace
  double timeout = 0.0;            ///< 0: the context's
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

  /// Runs `validate` (the caller's checks of the buffers of one execution). With execute-time
  /// checking on, every rank then agrees, in one bounded all-reduce, that all ranks' buffers are
  /// valid and that all execute this plan in the same direction (0 forward, 1 reverse/inverse):
  /// otherwise every rank throws. Off, `validate` runs alone, and nothing is allocated.
  template <class Validate> void agree_execute(int direction, Validate&& validate) {
    if (!check_) {
      validate();
      return;
    }
    std::exception_ptr local;
    try {
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
  /// same backend. Allocates nothing.
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

private:
  void agree_execute_round(int direction, std::exception_ptr const& local);
  void recheck_decide();
  [[nodiscard]] std::string recheck_summary() const;

  // The online re-check of an automatic choice (see docs/autotune.md).
  struct recheck_state {
    enum class phase { none, pending, confirmed, switched };
    phase state = phase::none;
    backend other = backend::automatic; ///< the runner-up (after a switch: the old choice)
    bool force = false;                 ///< switch whatever the times say (tests)
    bool timing = false;                ///< the exchange in flight is timed
    int done = 0;                       ///< forward exchanges timed so far
    double spent = 0.0;                 ///< seconds spent in start of the exchange in flight
    std::array<double, recheck_executions> times{};
    double medians[2] = {0.0, 0.0}; ///< chosen, runner-up (at the decision)
    std::string reason;             ///< why there is (no) re-check
  };

  context ctx_;
  bool check_ = false;
  schedule forward_;
  exec_config cfg_;
  backend selected_ = backend::mpi_pack;
  std::string report_;
  bool external_ = false;
  workspace_memory own_; // before the executors: they are destroyed first
  std::unique_ptr<executor> fwd_, rev_;
  std::unique_ptr<executor> alt_fwd_, alt_rev_; // the runner-up's, while/after re-checking
  executor* active_ = nullptr;
  recheck_state rc_;
};

/// Converts the public reduction to the internal combine op.
[[nodiscard]] combine_op to_combine(reduce_op op) noexcept;

/// Throws unless `ctx` holds the same processes in the same order as `comm` (collective
/// validation helper; call inside collective_check).
void require_context_matches(context const& ctx, MPI_Comm comm, char const* what);

} // namespace halox::detail
