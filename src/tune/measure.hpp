#pragma once
// The collective half of automatic selection: agreeing on the settings, computing the cache key
// every rank shares, and timing candidates with max-over-ranks trial times.

#include "exec/executor.hpp"
#include "tune/cache_file.hpp"
#include "tune/decision.hpp"

#include <halox/halo.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace halox::detail {

/// Tuning settings after every rank agreed on them.
struct tune_settings {
  int warmup = 2;
  int trials = 5;
  double budget = 2.0;                 ///< seconds ($HALOX_TUNE_BUDGET overrides tune_options)
  backend forced = backend::automatic; ///< from $HALOX_BACKEND; automatic = not forced
};

/// Reads $HALOX_BACKEND and $HALOX_TUNE_BUDGET and validates them with `t` on every rank, then
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
};

/// Times each backend of `order` on scratch buffers of `s`'s layout: build its executor (a
/// candidate that fails to build on any rank is `unavailable` everywhere), `warmup` untimed
/// forward exchanges, a barrier, then `trials` timed ones; one MPI_Allreduce(MAX) turns the
/// per-rank trial times into max-over-ranks times, whose median is the score. Stops before the
/// next candidate once the max-over-ranks elapsed time reaches the budget. Every decision is
/// taken on reduced values, so all ranks take the same path. Collective over `cfg.comm`.
[[nodiscard]] measurement measure_candidates(std::vector<backend> const& order, schedule const& s,
                                             exec_config const& cfg, tune_settings const& set);

} // namespace halox::detail
