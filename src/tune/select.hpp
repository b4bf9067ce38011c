#pragma once
// Backend selection for a plan: honour an explicit choice or $HALOX_BACKEND, otherwise take the
// plan cache's decision or measure the candidates (see docs/autotune.md).

#include "exec/executor.hpp"
#include "tune/decision.hpp"

#include <halox/tune.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// Outcome of the selection.
struct selection {
  backend chosen = backend::mpi_pack;
  /// How it was chosen: "requested", "forced by HALOX_BACKEND=...", or "auto: ..." with the
  /// median time and interval of every candidate (measured now or when the cached decision was
  /// made).
  std::string report;
  /// Every candidate's outcome, when the choice was automatic (empty otherwise).
  std::vector<candidate_result> candidates;
  /// The forward executor of `chosen` that was timed (measured decisions only; else null): the
  /// plan keeps this very object. Its workspace is unbound.
  std::unique_ptr<executor> chosen_exec;
  /// The backend the plan re-checks `chosen` against, in its first executions or when the
  /// watch sees the choice drift (see docs/autotune.md); automatic when there is neither.
  backend runner_up = backend::automatic;
  /// The re-check runs in the plan's first forward executions (else only if the watch asks).
  bool recheck_first = false;
  /// The plan keeps timing its forward executions and re-checks when the choice drifts.
  bool watch = false;
  /// The runner-up's median when the choice was made (seconds): the watch's first yardstick.
  double runner_median = 0.0;
  /// Its timed forward executor, when measured now (else null: the plan builds it).
  std::unique_ptr<executor> runner_exec;
  /// The re-check switches to the runner-up whatever it measures ($HALOX_TUNE_RECHECK=switch).
  bool force_switch = false;
  /// Why there is no re-check, or why there is one, for describe(); why there is no watch.
  std::string recheck_reason;
  std::string watch_reason;
};

/// Chooses the backend for schedule `s` on the plan communicator `cfg.comm`. `requested` other
/// than automatic is used as is, with no communication. Otherwise collective: every rank reaches
/// the same decision, because settings are agreed on first, cached decisions are read by rank 0
/// and broadcast, and measured decisions are taken on max-over-ranks timings only. `key`
/// identifies the geometry for the plan cache.
[[nodiscard]] selection select_backend(backend requested, schedule const& s, exec_config const& cfg,
                                       tune_options const& tune, std::uint64_t key);

} // namespace halox::detail
