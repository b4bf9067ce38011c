#pragma once
// The autotuner after plan construction: an executor that runs the backend the race chose and
// keeps checking that choice on the caller's own buffers (see docs/autotune.md). While the
// online re-check runs, forward exchanges alternate between the choice's executor and the
// runner-up's and are timed; the wait of the last one takes the decision (one bounded
// all-reduce of the timings, so every rank keeps the same backend). After it, the watch times
// every forward exchange and starts a new re-check when the choice drifts above the runner-up.
// The forward and reverse executors of a plan share that state, so that both directions
// switch together. To the plan they are ordinary executors: the plan holds one per direction
// and knows nothing of races or re-checks.

#include "exec/executor.hpp"
#include "tune/select.hpp"

#include <memory>

namespace halox::detail {

/// Makes `fwd` and `rev` (the chosen backend's executors of `forward` and its reverse, built and
/// warmed on every rank) adaptive when `sel` names a runner-up: builds and warms the
/// runner-up's executors (collective over `cfg.comm`: when some rank cannot build them, no rank
/// re-checks) and replaces `fwd` and `rev` by tuned executors that hold both pairs (their
/// choice_summary() then reports the re-check and the watch). Without a runner-up they stay as
/// they are and the return value says why there is no re-check or watch, for describe() (empty
/// when there is nothing to say). Takes sel.runner_exec.
[[nodiscard]] std::string make_adaptive(selection& sel, schedule const& forward,
                                        exec_config const& cfg, std::unique_ptr<executor>& fwd,
                                        std::unique_ptr<executor>& rev);

/// Forward executions the online re-check times: the first pair is a warm-up (first use of the
/// caller's buffers), then the chosen backend and the runner-up alternate.
inline constexpr int recheck_executions = 10;
/// Fraction by which the runner-up's median must beat the chosen backend's to switch.
inline constexpr double recheck_margin = 0.05;
/// Forward executions whose median the watch compares (the last ones before each check).
inline constexpr int watch_window = 16;
/// Executions between the watch's first checks; doubled after each quiet check, up to
/// watch_max_period, back to watch_window after a re-check.
inline constexpr int watch_max_period = 1024;
/// Fraction by which the choice's median must exceed the runner-up's last known median for the
/// watch to start a re-check.
inline constexpr double watch_margin = 0.25;

} // namespace halox::detail
