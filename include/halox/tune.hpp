#pragma once
/// \file tune.hpp
/// Automatic backend selection: the process's plan cache and what selection has done so far.
///
/// A plan built with `backend::automatic` (the default) races every applicable backend on
/// scratch buffers of its own layout, in interleaved rounds until the leader's confidence
/// interval separates from the others' or a budget is spent, keeps the fastest (re-checking a
/// close call against the runner-up in its first executions) and remembers the choice in a plan
/// cache (in memory for the process, and optionally in a file: `tune_options::cache_file` or
/// `$HALOX_PLAN_CACHE`). `halo_plan::describe()` shows the choice, every candidate's median and
/// interval, and the re-check.
/// See docs/autotune.md.

#include <cstdint>
#include <string>

namespace halox {

/// Options of automatic backend selection (used when the backend is `automatic`).
struct tune_options {
  int warmup = 2; ///< untimed runs per candidate
  /// Rounds every candidate is timed in before any is dropped or a winner declared (a round
  /// times each remaining candidate once, interleaved; the median of max-over-ranks counts).
  int trials = 5;
  double budget_seconds = 2.; ///< stop measuring past this time ($HALOX_TUNE_BUDGET overrides)
  std::string cache_file;     ///< on-disk plan cache ("" = $HALOX_PLAN_CACHE, or none)
  /// Rounds after which the best median wins even when the confidence intervals still overlap
  /// ($HALOX_TUNE_MAX_ROUNDS overrides).
  int max_rounds = 64;
  /// When the winner's interval overlapped the runner-up's, the plan's first forward
  /// executions alternate between both and the plan keeps the faster (one small all-reduce at
  /// the decision; $HALOX_TUNE_RECHECK overrides; see docs/autotune.md). Host memory only.
  bool recheck = true;
  /// After the choice (and any re-check), keep timing forward executions and re-check against
  /// the runner-up when the choice becomes clearly slower than the runner-up was measured (a
  /// transport changing protocol, memory or network contention). One small all-reduce at each
  /// check, at exponentially growing intervals (16, 32, ... 1024 executions); only for
  /// exchanges of 20 us or more, host memory, and with `recheck` on ($HALOX_TUNE_WATCH
  /// overrides; see docs/autotune.md).
  bool watch = true;
};

/// Counters of automatic selection in this process (each rank counts its own plans).
struct tune_statistics {
  std::uint64_t measured = 0;         ///< decisions made by measuring candidates
  std::uint64_t memory_hits = 0;      ///< decisions taken from the in-memory plan cache
  std::uint64_t file_hits = 0;        ///< decisions taken from entries read from a cache file
  std::uint64_t forced = 0;           ///< automatic plans forced by `$HALOX_BACKEND`
  std::uint64_t trivial = 0;          ///< plans without messages (nothing to measure)
  std::uint64_t candidates_timed = 0; ///< candidate executors built and timed
};

/// The counters so far.
[[nodiscard]] tune_statistics tune_stats() noexcept;

/// Forgets every decision held in memory and which cache files were read, so the next automatic
/// plan consults the cache file again (or measures). Files are left as they are. Local to the
/// calling process; decisions are taken on rank 0 of each plan and broadcast, so ranks never
/// diverge whichever of them call it.
void clear_plan_cache();

} // namespace halox
