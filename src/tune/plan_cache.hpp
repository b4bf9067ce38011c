#pragma once
// The process-wide side of selection: the in-memory plan cache, the cache files it was filled
// from (read and appended by rank 0 of a plan only), the counters behind halox::tune_stats()
// and the hooks tests use to skew clocks and capture warnings.

#include "tune/cache_file.hpp"

#include <halox/tune.hpp>

#include <functional>
#include <optional>
#include <string>

namespace halox::detail {

/// Settable from tests (not thread-safe: set them before building plans).
struct tune_hooks {
  /// Seconds since some fixed point; empty means MPI_Wtime. Drives trial times and the budget.
  std::function<double()> clock;
  /// Seconds added to this rank's measured time of trial `trial` of backend `b` (default none):
  /// makes one rank's timings differ from another's.
  std::function<double(backend b, int trial)> skew;
  /// Seconds added to this rank's time of forward execution `execution` (0, 1, ... since the
  /// plan was built) run with backend `b`, in the plan's re-check and watch; when set it
  /// replaces `skew` there (default none): makes a choice drift after it was made.
  std::function<double(backend b, long long execution)> exec_skew;
  /// Receives each warning and verbose line (rank 0 only); empty means stderr.
  std::function<void(std::string const&)> log;
};

/// The hooks in effect.
[[nodiscard]] tune_hooks& test_hooks();

/// Emits one line through the log hook or to stderr (the caller makes sure it is rank 0).
void tune_log(std::string const& line);

/// Which counter a selection bumps.
enum class tune_event { measured, memory_hit, file_hit, forced, trivial, candidate_timed };
/// Bumps a counter of halox::tune_stats().
void count(tune_event e) noexcept;

/// Where a cached decision came from.
enum class cache_source { memory, file };

/// A decision found in the cache.
struct cache_hit {
  cache_entry entry;
  cache_source source = cache_source::memory;
};

/// Looks `key` up in memory, after reading `file` (when not empty) the first time it is named.
/// A file that is foreign or corrupt is ignored with a warning through `tune_log`, once. Never
/// throws; call on rank 0 only (other ranks must not open the file).
[[nodiscard]] std::optional<cache_hit> cache_lookup(cache_key const& key, std::string const& file);

/// Remembers a decision in memory and, when `file` is not empty, appends it there (rank 0
/// only), writing the header first if the file is new. A file that was not trusted when read is
/// never written. Never throws: a failed write is a warning.
void cache_store(cache_key const& key, cache_entry const& e, std::string const& file,
                 bool write_file);

/// The cache file of `tune`: `tune.cache_file`, else `$HALOX_PLAN_CACHE`, else "".
[[nodiscard]] std::string cache_file_path(std::string const& configured);

/// "halox <version>" of this build, as stamped in cache files.
[[nodiscard]] std::string halox_version();

} // namespace halox::detail
