#include "common/mpi_bench.hpp"

#include <halox/info.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace halox::bench {

namespace {

settings g_settings;
int g_rank = 0;
int g_size = 1;

// A numeric setting checked against its range; `problem` names the value, the range and what
// it sets when the text is not a number in range.
struct numeric_rule {
  double min, max;
  bool integer;
  char const* meaning;
};

std::string check_number(std::string const& name, std::string const& text, numeric_rule r,
                         double& out) {
  char* end = nullptr;
  double const x = std::strtod(text.c_str(), &end);
  bool const ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(x) &&
                  x >= r.min && x <= r.max && (!r.integer || x == std::floor(x));
  if (ok) {
    out = x;
    return {};
  }
  char range[96];
  if (r.integer)
    std::snprintf(range, sizeof range, "a whole number from %.0f to %.0f", r.min, r.max);
  else
    std::snprintf(range, sizeof range, "a number from %g to %g", r.min, r.max);
  return name + "='" + text + "' is invalid: expected " + range + " (" + r.meaning + ")";
}

// HALOX_BENCH_* settings: absent or empty keeps the default; anything else must be valid.
double env_number(char const* name, double fallback, numeric_rule r, std::string& problem) {
  char const* v = std::getenv(name);
  if (!v || !*v || !problem.empty()) return fallback;
  double x = fallback;
  problem = check_number(name, v, r, x);
  return x;
}

// Google Benchmark aborts on some out-of-range values (a negative repetition count fails an
// internal check): halox-bench checks its numeric flags first, so that a typo is an error
// message and exit code 2 rather than a crash.
std::string check_benchmark_flags(int argc, char** argv) {
  struct flag {
    char const* prefix;
    numeric_rule rule;
  };
  static flag const flags[] = {
      {"--benchmark_repetitions=", {1, 2147483647, true, "repetitions of each entry"}},
      {"--benchmark_min_time=",
       {0, 1e9, false, "seconds per entry; halox entries fix their iterations"}},
      {"--benchmark_min_warmup_time=", {0, 1e9, false, "seconds of warm-up per entry"}},
      {"--v=", {0, 2147483647, true, "verbosity level"}},
  };
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    for (auto const& f : flags) {
      std::string const prefix = f.prefix;
      if (a.compare(0, prefix.size(), prefix) != 0) continue;
      double x = 0;
      std::string const problem =
          check_number(prefix.substr(0, prefix.size() - 1), a.substr(prefix.size()), f.rule, x);
      if (!problem.empty()) return problem;
    }
  }
  return {};
}

// Google Benchmark reporter that prints nothing: ranks other than 0 run every entry (they take
// part in its collectives) but must not report.
class null_reporter : public benchmark::BenchmarkReporter {
public:
  bool ReportContext(Context const&) override { return true; }
  void ReportRuns(std::vector<Run> const&) override {}
};

std::string mpi_library() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<std::size_t>(len));
  auto const nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\0')) s.pop_back();
  return s;
}

} // namespace

settings const& config() noexcept { return g_settings; }
int world_rank() noexcept { return g_rank; }
int world_size() noexcept { return g_size; }

void init(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  double v[6] = {};
  std::string problem; // rank 0's: the first invalid flag or setting
  if (g_rank == 0) {
    settings s;
    problem = check_benchmark_flags(*argc, *argv);
    v[0] = env_number("HALOX_BENCH_SCALE", s.scale, {1e-6, 1e6, false, "multiplies every extent"},
                      problem);
    v[1] = env_number("HALOX_BENCH_TIME", s.seconds, {1e-6, 1e6, false, "timed seconds per entry"},
                      problem);
    v[2] = env_number("HALOX_BENCH_MIN_ITERS", s.min_iters,
                      {1, 1e8, true, "fewest iterations per entry"}, problem);
    v[3] = env_number("HALOX_BENCH_MAX_ITERS", s.max_iters,
                      {1, 1e8, true, "most iterations per entry"}, problem);
    v[4] = env_number("HALOX_BENCH_WARMUP", s.warmup,
                      {0, 1e6, true, "untimed runs before each entry"}, problem);
    v[5] = env_number("HALOX_DDT_MAX_EXTENT", s.ddt_max_extent,
                      {1, 1e18, false, "bytes a datatype object may span"}, problem);
  }
  // A bad value stops every rank, with one message (rank 0's) and exit code 2.
  int bad = problem.empty() ? 0 : 1;
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (bad) {
    if (g_rank == 0)
      std::fprintf(stderr, "halox-bench: %s; fix it and run again\n", problem.c_str());
    MPI_Finalize();
    std::exit(2);
  }
  // Every rank must register the same entries with the same iteration counts: rank 0's view of
  // the environment is the one that counts.
  MPI_Bcast(v, 6, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  g_settings.scale = v[0];
  g_settings.seconds = v[1];
  g_settings.min_iters = std::max(1, static_cast<int>(v[2]));
  g_settings.max_iters = std::max(g_settings.min_iters, static_cast<int>(v[3]));
  g_settings.warmup = std::max(0, static_cast<int>(v[4]));
  g_settings.ddt_max_extent = v[5];

  if (g_rank != 0) {
    // Only rank 0 writes --benchmark_out; the others would truncate the same file.
    int out = 1;
    for (int i = 1; i < *argc; ++i)
      if (std::strncmp((*argv)[i], "--benchmark_out", 15) != 0) (*argv)[out++] = (*argv)[i];
    (*argv)[out] = nullptr;
    *argc = out;
  }
  benchmark::Initialize(argc, *argv);
  benchmark::AddCustomContext("mpi_library", mpi_library());
  benchmark::AddCustomContext("mpi_ranks", std::to_string(g_size));
  benchmark::AddCustomContext("halox_build", halox::build_info());
  char buf[160];
  std::snprintf(buf, sizeof buf, "scale=%g time=%g min_iters=%d max_iters=%d warmup=%d",
                g_settings.scale, g_settings.seconds, g_settings.min_iters, g_settings.max_iters,
                g_settings.warmup);
  benchmark::AddCustomContext("halox_bench_settings", buf);
}

int run_and_finalize(int argc, char** argv, std::function<void()> const& before_mpi_finalize) {
  int rc = 0;
  if (g_rank == 0) {
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) rc = 1;
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc == 0) {
    settle(0.5);
    if (g_rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      null_reporter quiet;
      benchmark::RunSpecifiedBenchmarks(&quiet);
    }
  }
  benchmark::Shutdown();
  if (before_mpi_finalize) before_mpi_finalize();
  MPI_Finalize();
  return rc;
}

int iterations_for(double est_seconds) {
  auto const& s = g_settings;
  double const n = s.seconds / std::max(est_seconds, 1e-7);
  if (!(n < s.max_iters)) return s.max_iters;
  return std::max(s.min_iters, static_cast<int>(std::lround(n)));
}

std::int64_t scaled(std::int64_t extent, std::int64_t floor) {
  auto const v =
      static_cast<std::int64_t>(std::llround(static_cast<double>(extent) * g_settings.scale));
  return std::max(std::min(floor, extent), v);
}

stats summarize(std::vector<double> v) {
  stats s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    // Nearest rank: the smallest value with at least q of the sample at or below it.
    auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.p90 = at(0.9);
  s.min = v.front();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

double time_once(MPI_Comm comm, std::function<void()> const& op) {
  MPI_Barrier(comm);
  double const t0 = MPI_Wtime();
  op();
  double const dt = MPI_Wtime() - t0;
  double mx = 0;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, comm);
  return mx;
}

void settle(double seconds) {
  double const t0 = MPI_Wtime();
  int go = 1;
  while (go) {
    MPI_Barrier(MPI_COMM_WORLD);
    go = MPI_Wtime() - t0 < seconds ? 1 : 0;
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
}

int warm_up(MPI_Comm comm, std::function<void()> const& op) {
  // Lock-step timed runs: every rank sees the same (max-reduced) times, so every rank stops at
  // the same run. A transport that connects lazily runs its first exchanges many times slower
  // than later ones; a fixed count of one or two would time those.
  std::vector<double> t;
  double spent = 0;
  for (;;) {
    double const x = time_once(comm, op);
    t.push_back(x);
    spent += x;
    int const n = static_cast<int>(t.size());
    if (n >= warm_up_max_runs || spent >= warm_up_max_seconds) return n;
    if (n < std::max(g_settings.warmup, warm_up_steady_runs)) continue;
    auto const last = t.end() - warm_up_steady_runs;
    auto const [lo, hi] = std::minmax_element(last, t.end());
    if (*hi <= *lo * (1.0 + warm_up_tolerance)) return n;
  }
}

stats timed_loop(benchmark::State& state, MPI_Comm comm, std::function<void()> const& op,
                 double bytes, std::function<void()> const& between) {
  state.counters["warmup_runs"] = warm_up(comm, op);
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(state.max_iterations));
  for (auto _ : state) {
    double const t = time_once(comm, op);
    state.SetIterationTime(t);
    times.push_back(t);
    if (between) between();
  }
  stats const s = summarize(times);
  state.counters["median_us"] = s.median * 1e6;
  state.counters["p90_us"] = s.p90 * 1e6;
  state.counters["min_us"] = s.min * 1e6;
  if (bytes > 0) {
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(s.n)));
    state.counters["GBps_median"] = s.median > 0 ? bytes / s.median * 1e-9 : 0;
  }
  return s;
}

stats measure(MPI_Comm comm, int iterations, std::function<void()> const& op) {
  (void)warm_up(comm, op);
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) times.push_back(time_once(comm, op));
  return summarize(times);
}

bool all_ok(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

double max_over(MPI_Comm comm, double v) {
  double r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, comm);
  return r;
}

double min_over(MPI_Comm comm, double v) {
  double r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MIN, comm);
  return r;
}

double p90_statistic(std::vector<double> const& v) { return summarize(v).p90; }

benchmark::internal::Benchmark* add(std::string const& name, int iterations,
                                    std::function<void(benchmark::State&)> fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& st) {
    try {
      fn(st);
    } catch (std::exception const& e) {
      // Reached only by failures that every rank hits alike (set-up errors are agreed on with
      // all_ok before the loop); report once, keep the other entries running.
      if (g_rank == 0) std::fprintf(stderr, "halox-bench: %s\n", e.what());
      if (!st.error_occurred()) st.SkipWithError(e.what());
    }
  });
  b->Iterations(iterations)->UseManualTime()->Unit(benchmark::kMicrosecond);
  b->ComputeStatistics("p90", p90_statistic);
  return b;
}

} // namespace halox::bench
