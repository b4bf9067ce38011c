#pragma once
// The MPI side of halox's Google Benchmark executables: settings shared by every rank, a timing
// loop that keeps the ranks in lock step, and the statistics every entry reports.
//
// Rules every benchmark here follows, because a rank that diverges hangs the others in a
// collective:
//  - iteration counts are fixed at registration (`->Iterations(n)`), computed from settings that
//    rank 0 broadcast and from global geometry, so they are identical on every rank;
//  - each iteration is MPI_Barrier, t0, the operation, t1, MPI_Allreduce(MAX) of t1 - t0, and
//    that maximum is the iteration's time (`->UseManualTime()`);
//  - a failure in set-up is agreed on by all ranks (`all_ok`) before anyone skips.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace halox::bench {

/// Collective over MPI_COMM_WORLD: exchanges barriers for about `seconds` (rank 0's clock) so
/// that start-up effects (lazy connections, the scheduler still placing ranks) are over before
/// the first entry is timed.
void settle(double seconds);

/// Run-wide settings, read from the environment on rank 0 and broadcast.
struct settings {
  double scale = 1.0;   ///< HALOX_BENCH_SCALE: multiplies every tensor extent
  double seconds = 0.5; ///< HALOX_BENCH_TIME: timed seconds aimed at per entry
  int min_iters = 10;   ///< HALOX_BENCH_MIN_ITERS
  int max_iters = 1000; ///< HALOX_BENCH_MAX_ITERS
  int warmup = 2;       ///< HALOX_BENCH_WARMUP: the fewest warm-up runs before each entry
  double ddt_max_extent =
      2.2e9; ///< HALOX_DDT_MAX_EXTENT: skip datatype objects spanning more bytes
};

/// The settings (valid after `init`).
[[nodiscard]] settings const& config() noexcept;
/// World rank and size (valid after `init`).
[[nodiscard]] int world_rank() noexcept;
[[nodiscard]] int world_size() noexcept;

/// MPI_Init, settings broadcast, then benchmark::Initialize on an argument list from which
/// ranks other than 0 have dropped `--benchmark_out*` (only rank 0 writes the file). Adds the
/// MPI library, rank count and settings to the benchmark context.
void init(int* argc, char*** argv);
/// Runs the registered benchmarks (rank 0 reports, other ranks use a null reporter), shuts
/// Google Benchmark down, calls `before_mpi_finalize` (a library initialised on top of MPI
/// shuts down there) and finalises MPI. Returns the process exit code.
int run_and_finalize(int argc, char** argv, std::function<void()> const& before_mpi_finalize = {});

/// Iterations for an entry whose single run is expected to take `est_seconds`: aims at
/// `config().seconds` of timed work within [min_iters, max_iters]. Deterministic, so equal on
/// every rank that passes the same estimate.
[[nodiscard]] int iterations_for(double est_seconds);
/// `extent` scaled by `config().scale`, never below `floor`.
[[nodiscard]] std::int64_t scaled(std::int64_t extent, std::int64_t floor = 4);

/// Statistics of one entry's iterations (each the max over ranks), in seconds.
struct stats {
  double median = 0, p90 = 0, min = 0, mean = 0;
  int n = 0;
};
/// Computes the statistics of a sample.
[[nodiscard]] stats summarize(std::vector<double> v);

/// One lock-step measurement: MPI_Barrier, `op`, MPI_Allreduce(MAX) of its time (seconds).
double time_once(MPI_Comm comm, std::function<void()> const& op);

/// Warm-up runs stop when this many in a row agree within warm_up_tolerance...
inline constexpr int warm_up_steady_runs = 3;
inline constexpr double warm_up_tolerance = 0.25;
/// ...or after this many runs, or this many seconds of them, whichever comes first.
inline constexpr int warm_up_max_runs = 100;
inline constexpr double warm_up_max_seconds = 1.0;

/// Collective over `comm`: runs `op` in lock step (time_once) until its time is steady: at
/// least `config().warmup` runs, then until the last warm_up_steady_runs times lie within
/// warm_up_tolerance of their minimum, at most warm_up_max_runs runs or warm_up_max_seconds.
/// Every rank stops at the same run. Returns the number of runs.
int warm_up(MPI_Comm comm, std::function<void()> const& op);

/// Google Benchmark's loop with lock-step timing over `comm`: warms `op` up until its time is
/// steady (warm_up; the counter warmup_runs says how many runs that took), then one timed call
/// per iteration. Sets the iteration times and the counters
/// median_us, p90_us, min_us; `bytes` per iteration feed bytes_per_second (from the mean) and
/// the counter GBps_median. `between`, when given, runs after every iteration outside the
/// timing (the backend entries measure their limits there, interleaved, so that a change of
/// machine load during the run hits the limit and the backend alike). Returns the statistics.
stats timed_loop(benchmark::State& state, MPI_Comm comm, std::function<void()> const& op,
                 double bytes, std::function<void()> const& between = {});
/// The same measurement outside Google Benchmark (used to measure a missing limit inline).
stats measure(MPI_Comm comm, int iterations, std::function<void()> const& op);

/// True on every rank when `ok` is true on every rank (one MPI_Allreduce).
[[nodiscard]] bool all_ok(MPI_Comm comm, bool ok);
/// Max over the ranks of `comm`.
[[nodiscard]] double max_over(MPI_Comm comm, double v);
/// Min over the ranks of `comm`.
[[nodiscard]] double min_over(MPI_Comm comm, double v);

/// The p90 of a sample, for `->ComputeStatistics("p90", p90_statistic)` across repetitions.
double p90_statistic(std::vector<double> const& v);

/// Registers `fn` under `name` with the settings every halox entry uses: `iterations` fixed,
/// manual time, microseconds, and a p90 aggregate when repetitions are asked for.
benchmark::internal::Benchmark* add(std::string const& name, int iterations,
                                    std::function<void(benchmark::State&)> fn);

} // namespace halox::bench
