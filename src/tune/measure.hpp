#pragma once
// The collective half of automatic selection: agreeing on the settings, computing the cache key
// every rank shares, and timing candidates with max-over-ranks trial times.

#include "exec/executor.hpp"
#include "tune/cache_file.hpp"
#include "tune/decision.hpp"

#include <halox/halo.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// When the online re-check runs (see docs/autotune.md, "Re-check in the first executions").
enum class recheck_mode {
  off,    ///< never
  on,     ///< when the winner's interval overlapped the runner-up's (the default)
  always, ///< whenever there is a runner-up (for testing the path)
  force   ///< always, and switch to the runner-up whatever the times say (for tests)
};

/// Tuning settings after every rank agreed on them.
struct tune_settings {
  int warmup = 2;
  int trials = 5;                          ///< minimum rounds
  int max_rounds = 64;                     ///< ($HALOX_TUNE_MAX_ROUNDS overrides tune_options)
  double budget = 2.0;                     ///< seconds ($HALOX_TUNE_BUDGET overrides tune_options)
  recheck_mode recheck = recheck_mode::on; ///< ($HALOX_TUNE_RECHECK overrides tune_options)
  bool watch = true;                       ///< ($HALOX_TUNE_WATCH overrides tune_options)
  backend forced = backend::automatic;     ///< from $HALOX_BACKEND; automatic = not forced
  bool verbose = false;                    ///< $HALOX_VERBOSE (rank 0 of the plan logs)
};

/// Reads $HALOX_BACKEND, $HALOX_TUNE_BUDGET, $HALOX_TUNE_MAX_ROUNDS, $HALOX_TUNE_RECHECK,
/// $HALOX_TUNE_WATCH and $HALOX_VERBOSE and validates them with `t` on every rank, then
/// one MPI_Allreduce makes sure all ranks hold the same values. Throws `halox::error` on every
/// rank when any rank's settings are invalid (that rank with its own message) or when ranks
/// disagree. Collective over `comm`.
[[nodiscard]] tune_settings agree_settings(MPI_Comm comm, tune_options const& t, memory_space mem);

/// The cache key of schedule `s` on `comm`: `geometry` plus a digest of every rank's schedule
/// shape, total messages and bytes (one MPI_Allreduce). Collective; identical on every rank.
[[nodiscard]] cache_key make_cache_key(MPI_Comm comm, schedule const& s, memory_space mem,
                                       std::uint64_t geometry);

/// Outcome of timing.
struct measurement {
  std::vector<candidate_result> candidates; ///< in trial order
  double seconds = 0.0;                     ///< tuning time, max over ranks
  int rounds = 0;                           ///< rounds run
  bool separated = false; ///< the winner's interval is separated from every other one's
  int winner = -1;        ///< index in `candidates`; -1 when none could be built
  int runner_up = -1;     ///< index in `candidates` of the second best; -1 when none
  /// The forward executors of the winner and the runner-up, the very objects that were timed,
  /// for the plan to keep. Their workspace is unbound (the tuning workspace is gone): bind one.
  std::unique_ptr<executor> winner_exec, runner_exec;
};

/// Races the backends of `order` on `s`'s real slot layouts: every candidate's forward executor
/// is built with `make_executor(b, s, cfg)`, exactly as the plan builds its own (one candidate
/// that fails to build on any rank is `unavailable` everywhere; one MPI_Allreduce each), all
/// are bound to one tuning workspace, each runs `warmup` untimed exchanges, then rounds
/// interleave the candidates: in each, every remaining candidate runs two exchanges, one on
/// each of two distinct sets of scratch buffers (so per-address state is paid as on caller
/// buffers that move), and one MPI_Allreduce(MAX) turns the per-rank times into the round's
/// times. `judge_race` then drops clearly slower candidates and decides when to stop. Stops
/// building further candidates once the budget is used. Every decision is taken on reduced
/// values, so all ranks take the same path. Collective over `cfg.comm`.
[[nodiscard]] measurement measure_candidates(std::vector<backend> const& order, schedule const& s,
                                             exec_config const& cfg, tune_settings const& set);

} // namespace halox::detail
