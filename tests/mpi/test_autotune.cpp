// Automatic backend selection on MPI_COMM_WORLD: one decision on every rank even when ranks time
// differently, a collective budget, forcing by API and environment (with errors on every rank),
// the plan cache in memory and on disk (rank 0 reads, everyone follows), rejected files with a
// warning, and the oracle run on automatic plans.
//
// Plans without messages (one rank) are never measured, so the measuring tests skip there.
// Every test reaches the same collectives on every rank whatever its outcome; they are few,
// since each costs milliseconds under an oversubscribed MPICH.
#include "tune/plan_cache.hpp"

#include "oracle.hpp"

#include <halox/error.hpp>
#include <halox/halo.hpp>
#include <halox/info.hpp>
#include <halox/redistribute.hpp>
#include <halox/tune.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace halox;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// True when `s` is the same string on every rank (one all-reduce).
bool same_on_all_ranks(std::string const& s) {
  unsigned long long h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  unsigned long long in[2] = {h, ~h}, out[2] = {};
  MPI_Allreduce(in, out, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return out[0] == in[0] && out[1] == in[1];
}

// A periodic 2-D tensor split along dimension 0 over the world: at two ranks or more every rank
// exchanges messages. `rows` makes geometries distinct between tests.
tensor_desc small_tensor(index_t rows) {
  process_grid g(MPI_COMM_WORLD, {world_size(), 1});
  return tensor_desc(g, {rows * world_size(), 12}, dtype::float32,
                     {dim_options::halo(1, true), dim_options::halo(2)});
}

// The selection report inside a plan's describe() text: "auto: ...", without the per-rank
// schedule summary that follows it.
std::string selection_report(std::string const& described) {
  auto const b = described.find("(auto: ");
  if (b == std::string::npos) return described;
  return described.substr(b + 1, described.find("); ", b) - b - 1);
}

// Automatic options with fewer runs per candidate (the tests check decisions, not speed) and a
// budget no loaded machine reaches, so that every candidate is measured.
halo_options quick() {
  halo_options o;
  o.tune.warmup = 1;
  o.tune.trials = 3;
  o.tune.budget_seconds = 600;
  return o;
}

std::string read_file(std::string const& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(std::string const& path, std::string const& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string temp_path(char const* tag) {
  return "/tmp/halox_autotune_" + std::string(tag) + "_" + std::to_string(getpid()) + ".cache";
}

bool contains(std::string const& s, std::string const& part) {
  return s.find(part) != std::string::npos;
}

// Clean environment, empty cache and default hooks for every test, restored afterwards.
class Autotune : public testing::Test {
protected:
  void SetUp() override {
    for (char const* v : env_vars) {
      char const* old = std::getenv(v);
      saved_.push_back(old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(v);
    }
    clear_plan_cache();
    detail::test_hooks() = {};
  }
  void TearDown() override {
    for (std::size_t i = 0; i < std::size(env_vars); ++i) {
      if (saved_[i])
        setenv(env_vars[i], saved_[i]->c_str(), 1);
      else
        unsetenv(env_vars[i]);
    }
    detail::test_hooks() = {};
    clear_plan_cache();
  }
  // Captures the lines selection logs on this rank (rank 0 is the only one that should log).
  std::vector<std::string>& capture_log() {
    detail::test_hooks().log = [this](std::string const& l) { log_.push_back(l); };
    return log_;
  }

  static constexpr char const* env_vars[] = {
      "HALOX_BACKEND",         "HALOX_PLAN_CACHE",   "HALOX_TUNE_BUDGET", "HALOX_VERBOSE",
      "HALOX_TUNE_MAX_ROUNDS", "HALOX_TUNE_RECHECK", "HALOX_TUNE_WATCH"};
  std::vector<std::optional<std::string>> saved_;
  std::vector<std::string> log_;
};

TEST_F(Autotune, MeasuresEveryCandidateAndAgrees) {
  auto const t = small_tensor(8);
  auto const before = tune_stats();
  halo_options o; // default warm-ups and trials
  o.tune.budget_seconds = 600;
  halo_plan p(t, o);
  std::string const d = p.describe();
  if (world_size() == 1) {
    EXPECT_TRUE(contains(d, "nothing to measure")) << d;
    EXPECT_EQ(tune_stats().trivial, before.trivial + 1);
    return;
  }
  EXPECT_TRUE(contains(d, "auto: measured in")) << d;
  for (backend b : host_backends()) EXPECT_TRUE(contains(d, to_string(b))) << d;
  EXPECT_TRUE(contains(d, std::string(to_string(p.selected_backend())) + " ")) << d;
  EXPECT_TRUE(contains(d, " *")) << d;
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  EXPECT_EQ(tune_stats().candidates_timed, before.candidates_timed + host_backends().size());
  // Reduced timings: the whole report, times included, is the same text on every rank.
  EXPECT_TRUE(same_on_all_ranks(selection_report(d)));
}

TEST_F(Autotune, SkewedRankTimingsStillGiveOneDecision) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  int const rank = world_rank();
  // On its own, rank 0 would pick mpi_pack and rank 1 mpi_persistent; over max-over-ranks
  // times mpi_persistent (max 3 s) beats mpi_pack (max 5 s).
  detail::test_hooks().skew = [rank](backend b, int) {
    if (b == backend::mpi_pack) return rank == 0 ? 1.0 : rank == 1 ? 5.0 : 1.0;
    if (b == backend::mpi_persistent) return rank == 0 ? 3.0 : rank == 1 ? 2.0 : 1.0;
    return 10.0;
  };
  // The last rank's clock also has another origin and rate.
  if (rank == world_size() - 1) detail::test_hooks().clock = [] { return 1e6 + 3.0 * MPI_Wtime(); };
  auto const t = small_tensor(9);
  halo_plan p(t, quick());
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent) << p.describe();
  std::string const d = p.describe();
  EXPECT_TRUE(same_on_all_ranks(selection_report(d))) << d;
}

TEST_F(Autotune, BudgetDecisionIsCollective) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // Only the last rank's clock runs fast enough to exhaust the budget after one candidate; if
  // the budget were judged locally, that rank would stop and the others would wait for it.
  if (world_rank() == world_size() - 1)
    detail::test_hooks().clock = [] { return 1e7 * MPI_Wtime(); };
  halo_options o = quick();
  o.tune.budget_seconds = 0.5;
  auto const before = tune_stats();
  auto const t = small_tensor(10);
  halo_plan p(t, o);
  EXPECT_EQ(p.selected_backend(), backend::mpi_pack) << "the old default is measured first";
  EXPECT_TRUE(contains(p.describe(), "skipped (budget)")) << p.describe();
  EXPECT_EQ(tune_stats().candidates_timed, before.candidates_timed + 1);

  setenv("HALOX_TUNE_BUDGET", "0", 1); // the environment overrides tune_options
  clear_plan_cache();
  halo_plan q(small_tensor(11), quick());
  EXPECT_EQ(q.selected_backend(), backend::mpi_pack);
  EXPECT_EQ(tune_stats().candidates_timed, before.candidates_timed + 2);
}

TEST_F(Autotune, ExplicitMethodWinsOverEnvironment) {
  setenv("HALOX_BACKEND", "mpi_pack", 1);
  auto const before = tune_stats();
  halo_options o;
  o.method = backend::mpi_persistent;
  halo_plan p(small_tensor(12), o);
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent);
  EXPECT_TRUE(contains(p.describe(), "(requested)")) << p.describe();
  EXPECT_EQ(tune_stats().forced, before.forced);
  EXPECT_EQ(tune_stats().measured, before.measured);
}

TEST_F(Autotune, EnvironmentForcesAutomaticPlans) {
  auto const before = tune_stats();
  setenv("HALOX_BACKEND", "mpi_persistent", 1);
  halo_plan p(small_tensor(13));
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent);
  EXPECT_TRUE(contains(p.describe(), "forced by HALOX_BACKEND=mpi_persistent")) << p.describe();
  setenv("HALOX_BACKEND", "p2p", 1);
  halo_plan q(small_tensor(13));
  EXPECT_EQ(q.selected_backend(), backend::mpi_pack);
  EXPECT_EQ(tune_stats().forced, before.forced + 2);
  EXPECT_EQ(tune_stats().measured, before.measured);
}

// Builds an automatic plan and returns the message of the halox::error it threw ("" if none).
std::string plan_error(tensor_desc const& t) {
  try {
    halo_plan p(t);
  } catch (error const& e) {
    return e.message();
  }
  return "";
}

TEST_F(Autotune, BadEnvironmentFailsOnEveryRank) {
  auto const t = small_tensor(14);
  setenv("HALOX_BACKEND", "warp_drive", 1);
  std::string const all = plan_error(t);
  EXPECT_TRUE(contains(all, "HALOX_BACKEND=warp_drive: unknown backend 'warp_drive'")) << all;

  setenv("HALOX_BACKEND", "nccl", 1); // a real name, but not for host memory
  std::string const nccl = plan_error(t);
  EXPECT_TRUE(contains(nccl, "not available for host memory")) << nccl;

  if (world_size() < 2) return;
  int const last = world_size() - 1;
  // Only the last rank is misconfigured: it names the problem, the others name that rank.
  setenv("HALOX_BACKEND", world_rank() == last ? "warp_drive" : "mpi_pack", 1);
  std::string const one = plan_error(t);
  if (world_rank() == last)
    EXPECT_TRUE(contains(one, "unknown backend 'warp_drive'")) << one;
  else
    EXPECT_TRUE(contains(one, "rank " + std::to_string(last) + " rejected")) << one;

  // Valid but different values: every rank refuses instead of running different backends.
  setenv("HALOX_BACKEND", world_rank() == last ? "mpi_persistent" : "mpi_pack", 1);
  std::string const differ = plan_error(t);
  EXPECT_TRUE(contains(differ, "differs between ranks")) << differ;
}

TEST_F(Autotune, MemoryCacheHitSkipsMeasurement) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  setenv("HALOX_VERBOSE", "1", 1);
  auto& log = capture_log();
  auto const t = small_tensor(15);
  auto const before = tune_stats();
  halo_plan first(t, quick());
  halo_plan second(t, quick());
  EXPECT_EQ(second.selected_backend(), first.selected_backend());
  EXPECT_TRUE(contains(second.describe(), "from the plan cache (memory)")) << second.describe();
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  EXPECT_EQ(tune_stats().memory_hits, before.memory_hits + 1);
  EXPECT_EQ(tune_stats().candidates_timed, before.candidates_timed + host_backends().size());
  // HALOX_VERBOSE: one line per decision, on rank 0 only.
  if (world_rank() == 0) {
    ASSERT_EQ(log.size(), 2u);
    EXPECT_TRUE(contains(log[0], "halox: backend ")) << log[0];
    EXPECT_TRUE(contains(log[1], "from the plan cache")) << log[1];
  } else {
    EXPECT_TRUE(log.empty());
  }
}

TEST_F(Autotune, CacheFileIsWrittenReadAndFollowedByEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  bool const root = world_rank() == 0;
  std::string const path = temp_path("roundtrip");
  if (root) std::remove(path.c_str());
  // Only rank 0 touches the file: the others are given a path that cannot exist.
  halo_options o = quick();
  o.tune.cache_file = root ? path : "/nonexistent/dir/never.cache";
  auto const t = small_tensor(16);
  auto const before = tune_stats();

  halo_plan measured(t, o);
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  backend const chosen = measured.selected_backend();
  std::string text;
  if (root) {
    text = read_file(path);
    EXPECT_TRUE(contains(text, "halox-plan-cache 2\n")) << text;
    EXPECT_TRUE(contains(text, "\nmpi " + mpi_library_version())) << text;
    EXPECT_TRUE(contains(text, "\nhalox ")) << text;
    EXPECT_TRUE(contains(text, std::string(" -> ") + to_string(chosen) + " ")) << text;
  }

  // A fresh process (simulated by forgetting the memory cache) takes the decision from the
  // file named by $HALOX_PLAN_CACHE when tune_options::cache_file is empty.
  clear_plan_cache();
  setenv("HALOX_PLAN_CACHE", root ? path.c_str() : "/nonexistent/dir/never.cache", 1);
  halo_plan cached(t, quick());
  EXPECT_EQ(cached.selected_backend(), chosen);
  EXPECT_TRUE(contains(cached.describe(), "from the plan cache (file)")) << cached.describe();
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  EXPECT_EQ(tune_stats().file_hits, before.file_hits + 1);

  // Rank 0's file is the authority: edit its decision and every rank follows it.
  backend const other =
      chosen == backend::mpi_persistent ? backend::mpi_pack : backend::mpi_persistent;
  if (root) {
    std::string const from = std::string(" -> ") + to_string(chosen) + " ";
    std::string edited = text;
    edited.replace(edited.find(from), from.size(), std::string(" -> ") + to_string(other) + " ");
    write_file(path, edited);
  }
  clear_plan_cache();
  halo_plan edited(t, quick());
  EXPECT_EQ(edited.selected_backend(), other) << edited.describe();
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  if (root) std::remove(path.c_str());
}

TEST_F(Autotune, ForeignOrCorruptCacheFileIsIgnoredWithAWarning) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  bool const root = world_rank() == 0;
  std::string const path = temp_path("rejected");
  halo_options o = quick();
  o.tune.cache_file = path;
  auto const t = small_tensor(17);
  if (root) std::remove(path.c_str());
  halo_plan first(t, o); // writes a valid entry for this very key
  auto& log = capture_log();

  std::string foreign;
  if (root) {
    std::string const text = read_file(path);
    std::string const mpi_line = "\nmpi " + mpi_library_version();
    foreign = text;
    foreign.replace(foreign.find(mpi_line), mpi_line.size(), "\nmpi Some Other MPI 9.9");
    write_file(path, foreign);
  }
  clear_plan_cache();
  auto const before = tune_stats();
  halo_plan p(t, o);
  EXPECT_TRUE(contains(p.describe(), "auto: measured")) << p.describe();
  EXPECT_EQ(tune_stats().measured, before.measured + 1);
  if (root) {
    ASSERT_EQ(log.size(), 1u);
    EXPECT_TRUE(contains(log[0], "halox warning: plan cache " + path +
                                     " ignored (foreign: "
                                     "written with MPI library 'Some Other MPI 9.9'"))
        << log[0];
    EXPECT_EQ(read_file(path), foreign) << "a rejected file must not be modified";
    write_file(path, "this is not a plan cache\n");
  } else {
    EXPECT_TRUE(log.empty());
  }

  clear_plan_cache();
  halo_plan q(t, o);
  EXPECT_TRUE(contains(q.describe(), "auto: measured")) << q.describe();
  EXPECT_EQ(tune_stats().measured, before.measured + 2);
  if (root) {
    ASSERT_EQ(log.size(), 2u);
    EXPECT_TRUE(contains(log[1], "ignored (corrupt: line 1 is not a halox plan cache header"))
        << log[1];
    std::remove(path.c_str());
  }
}

TEST_F(Autotune, AutomaticPlansPassTheOracle) {
  int const size = world_size();
  for (int i = 0; i < 3; ++i) {
    std::mt19937_64 rng(7919ull * static_cast<unsigned>(i) + static_cast<unsigned>(size));
    auto const c = verify::random_halo_case(rng, size, 600);
    auto const r = verify::run_halo_case(c, backend::automatic, MPI_COMM_WORLD);
    EXPECT_EQ(r.forward.mismatches, 0u) << c.str() << ": " << r.forward.first_error;
    EXPECT_EQ(r.reverse.mismatches, 0u) << c.str() << ": " << r.reverse.first_error;
  }
}

TEST_F(Autotune, WhicheverCandidateWinsPassesTheOracle) {
  int const size = world_size();
  if (size < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // Skewed timings make each host backend win in turn, through the automatic path.
  setenv("HALOX_TUNE_BUDGET", "600", 1);
  for (backend winner : host_backends()) {
    detail::test_hooks().skew = [winner](backend b, int) { return b == winner ? 0.0 : 1.0; };
    clear_plan_cache();
    std::mt19937_64 rng(104729ull + static_cast<unsigned>(size));
    auto const c = verify::random_halo_case(rng, size, 600);
    auto const r = verify::run_halo_case(c, backend::automatic, MPI_COMM_WORLD);
    EXPECT_EQ(r.forward.mismatches, 0u)
        << to_string(winner) << " " << c.str() << ": " << r.forward.first_error;
    EXPECT_EQ(r.reverse.mismatches, 0u)
        << to_string(winner) << " " << c.str() << ": " << r.reverse.first_error;
  }
}

// --- Rounds, intervals and the online re-check ---------------------------------------------

// A periodic 2-D float64 tensor split along dimension 0, periodic along dimension 1 too (so
// local copies are exercised as well), for execution oracles.
constexpr index_t oracle_cols = 10;
tensor_desc oracle_tensor(index_t rows) {
  process_grid g(MPI_COMM_WORLD, {world_size(), 1});
  return tensor_desc(g, {rows * world_size(), oracle_cols}, dtype::float64,
                     {dim_options::halo(1, true), dim_options::halo(2, true)});
}

double cell_value(tensor_desc const& t, index_t i, index_t j, int iteration) {
  index_t const rows = t.shape()[0];
  i = (i % rows + rows) % rows;
  j = (j % oracle_cols + oracle_cols) % oracle_cols;
  return static_cast<double>(i * oracle_cols + j) + 1e4 * iteration;
}

// Owned cells hold their value for `iteration`; halos hold -1.
void fill_owned(tensor_desc const& t, std::vector<double>& buf, int iteration) {
  buf.assign(t.local_elements(), -1.0);
  auto const o = t.owned_box();
  for (index_t i = o.lo[0]; i < o.hi[0]; ++i)
    for (index_t j = o.lo[1]; j < o.hi[1]; ++j)
      buf[t.local_offset({i, j})] = cell_value(t, i, j, iteration);
}

// Cells (owned and halo) that differ from the oracle after a forward exchange.
int wrong_after_forward(tensor_desc const& t, std::vector<double> const& buf, int iteration) {
  auto const o = t.owned_box();
  int wrong = 0;
  for (index_t i = o.lo[0] - 1; i < o.hi[0] + 1; ++i)
    for (index_t j = o.lo[1] - 2; j < o.hi[1] + 2; ++j)
      if (buf[t.local_offset({i, j})] != cell_value(t, i, j, iteration)) ++wrong;
  return wrong;
}

// The selected backend is the same on every rank.
bool same_backend_everywhere(backend b) {
  int const v = static_cast<int>(b);
  int in[2] = {v, -v}, out[2] = {};
  MPI_Allreduce(in, out, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out[0] == v && out[1] == -v;
}

// The backend named after `prefix` in `text` ("re-check against alltoallv (..." -> alltoallv).
std::string word_after(std::string const& text, std::string const& prefix) {
  auto const b = text.find(prefix);
  if (b == std::string::npos) return "";
  auto const from = b + prefix.size();
  auto const e = text.find_first_of(" ();,", from);
  return text.substr(from, e - from);
}

TEST_F(Autotune, ReportShowsRoundsIntervalsAndIsIdenticalOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  halo_plan p(oracle_tensor(6), quick());
  std::string const d = p.describe();
  EXPECT_TRUE(contains(d, "round(s) of the max over")) << d;
  EXPECT_TRUE(contains(d, "95% intervals")) << d;
  // Every measured candidate shows "<median> [<lo>, <hi>] x<rounds>".
  EXPECT_TRUE(contains(d, "] x")) << d;
  EXPECT_TRUE(same_on_all_ranks(selection_report(d))) << d;
  EXPECT_TRUE(same_backend_everywhere(p.selected_backend()));
}

TEST_F(Autotune, ClearlySlowerCandidatesAreDroppedAndTheIntervalsSeparate) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // mpi_persistent is 1 s faster per round than anything else: it separates at the minimum
  // number of rounds, everything else is dropped then, and no re-check is needed.
  detail::test_hooks().skew = [](backend b, int) {
    return b == backend::mpi_persistent ? 0.0 : 1.0;
  };
  halo_options o = quick();
  o.tune.trials = 6;
  halo_plan p(oracle_tensor(7), o);
  std::string const d = p.describe();
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent) << d;
  EXPECT_TRUE(contains(d, "6 round(s)")) << d;
  EXPECT_TRUE(contains(d, "95% intervals separated")) << d;
  EXPECT_TRUE(contains(d, "re-check: not needed, intervals separated")) << d;
}

TEST_F(Autotune, OverlappingIntervalsRunToTheRoundLimit) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // Two candidates alternate being faster round by round: their intervals never separate, the
  // race ends at max_rounds, the others having been dropped as clearly slower.
  detail::test_hooks().skew = [](backend b, int round) {
    if (b == backend::mpi_pack) return round % 2 ? 1.0 : 1.2;
    if (b == backend::alltoallv) return round % 2 ? 1.2 : 1.0;
    return 5.0;
  };
  halo_options o = quick();
  o.tune.max_rounds = 12;
  o.tune.recheck = false;
  halo_plan p(oracle_tensor(8), o);
  std::string const d = p.describe();
  EXPECT_TRUE(contains(d, "12 round(s)")) << d;
  EXPECT_TRUE(contains(d, "95% intervals overlapping")) << d;
  EXPECT_TRUE(contains(d, "re-check: off")) << d;
  backend const b = p.selected_backend();
  EXPECT_TRUE(b == backend::mpi_pack || b == backend::alltoallv) << d;
  EXPECT_TRUE(same_backend_everywhere(b));
}

// Runs `n` forward executions of `p` with fresh values each time, counting wrong cells.
int run_forward(halo_plan& p, tensor_desc const& t, int first, int n) {
  int wrong = 0;
  std::vector<double> x;
  for (int k = first; k < first + n; ++k) {
    fill_owned(t, x, k);
    p.execute(tensor_view(t, x));
    wrong += wrong_after_forward(t, x, k);
  }
  return wrong;
}

TEST_F(Autotune, RecheckRunsOnTheFirstExecutionsAndKeepsResultsCorrect) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  setenv("HALOX_TUNE_RECHECK", "always", 1);
  auto const t = oracle_tensor(9);
  halo_plan p(t, quick());
  std::string const before = p.describe();
  std::string const runner = word_after(before, "re-check against ");
  ASSERT_FALSE(runner.empty()) << before;
  EXPECT_NE(runner, to_string(p.selected_backend()));
  EXPECT_TRUE(contains(before, "0 of 10 forward executions done")) << before;
  // A reverse exchange in the middle is not part of the re-check and uses the current choice.
  EXPECT_EQ(run_forward(p, t, 0, 3), 0);
  std::vector<double> x;
  fill_owned(t, x, 3);
  p.execute_reverse(tensor_view(t, x), reduce_op::max);
  EXPECT_TRUE(contains(p.describe(), "3 of 10 forward executions done")) << p.describe();
  EXPECT_EQ(run_forward(p, t, 4, 9), 0);
  std::string const after = p.describe();
  EXPECT_TRUE(contains(after, "re-check confirmed") || contains(after, "re-check switched"))
      << after;
  auto const at = after.find("re-check");
  EXPECT_TRUE(same_on_all_ranks(after.substr(at, after.find("; ", at) - at))) << after;
  EXPECT_TRUE(same_backend_everywhere(p.selected_backend()));
}

TEST_F(Autotune, ForcedSwitchToTheRunnerUpIsCollectiveAndCorrect) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  setenv("HALOX_TUNE_RECHECK", "switch", 1);
  auto const t = oracle_tensor(10);
  halo_plan p(t, quick());
  backend const first = p.selected_backend();
  std::string const runner = word_after(p.describe(), "re-check against ");
  ASSERT_FALSE(runner.empty()) << p.describe();
  EXPECT_EQ(run_forward(p, t, 0, 10), 0);
  std::string const d = p.describe();
  EXPECT_EQ(std::string(to_string(p.selected_backend())), runner) << d;
  EXPECT_NE(p.selected_backend(), first);
  EXPECT_TRUE(
      contains(d, std::string("re-check switched from ") + to_string(first) + " to " + runner))
      << d;
  EXPECT_TRUE(same_backend_everywhere(p.selected_backend()));
  // After the switch, forward and reverse exchanges still give the oracle's answer: reverse
  // sums are compared with an explicitly requested mpi_pack plan on the same input.
  EXPECT_EQ(run_forward(p, t, 10, 3), 0);
  halo_options ref_o;
  ref_o.method = backend::mpi_pack;
  halo_plan ref(t, ref_o);
  std::vector<double> a, b;
  fill_owned(t, a, 20);
  for (auto& v : a)
    if (v < 0) v = 0.5; // halo cells contribute 0.5 each to their owners
  b = a;
  p.execute_reverse(tensor_view(t, a), reduce_op::sum);
  ref.execute_reverse(tensor_view(t, b), reduce_op::sum);
  int differ = 0;
  auto const o = t.owned_box();
  for (index_t i = o.lo[0]; i < o.hi[0]; ++i)
    for (index_t j = o.lo[1]; j < o.hi[1]; ++j)
      if (a[t.local_offset({i, j})] != b[t.local_offset({i, j})]) ++differ;
  EXPECT_EQ(differ, 0);
}

TEST_F(Autotune, ForcedSwitchInARedistributionKeepsResultsCorrect) {
  int const size = world_size();
  if (size < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  setenv("HALOX_TUNE_RECHECK", "switch", 1);
  index_t const rows = 4 * size, cols = 6 * size;
  process_grid by_rows(MPI_COMM_WORLD, {size, 1}), by_cols(MPI_COMM_WORLD, {1, size});
  tensor_desc const src(by_rows, {rows, cols}, dtype::float64);
  tensor_desc const dst(by_cols, {rows, cols}, dtype::float64);
  redistribute_options ro;
  ro.tune.warmup = 1;
  ro.tune.trials = 3;
  ro.tune.budget_seconds = 600;
  redistribute_plan r(src, dst, ro);
  backend const first = r.selected_backend();
  std::string const d0 = r.describe();
  ASSERT_TRUE(contains(d0, "re-check against")) << d0;
  auto value = [&](index_t i, index_t j, int k) { return static_cast<double>(i * cols + j + k); };
  int wrong = 0;
  for (int k = 0; k < 12; ++k) {
    std::vector<double> x(src.local_elements()), y(dst.local_elements(), -1.0);
    auto const so = src.owned_box();
    for (index_t i = so.lo[0]; i < so.hi[0]; ++i)
      for (index_t j = so.lo[1]; j < so.hi[1]; ++j) x[src.local_offset({i, j})] = value(i, j, k);
    r.execute(tensor_view(src, x), tensor_view(dst, y));
    auto const dob = dst.owned_box();
    for (index_t i = dob.lo[0]; i < dob.hi[0]; ++i)
      for (index_t j = dob.lo[1]; j < dob.hi[1]; ++j)
        if (y[dst.local_offset({i, j})] != value(i, j, k)) ++wrong;
    std::vector<double> back(src.local_elements(), -1.0);
    r.execute_inverse(tensor_view(dst, y), tensor_view(src, back));
    for (index_t i = so.lo[0]; i < so.hi[0]; ++i)
      for (index_t j = so.lo[1]; j < so.hi[1]; ++j)
        if (back[src.local_offset({i, j})] != value(i, j, k)) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_NE(r.selected_backend(), first) << r.describe();
  EXPECT_TRUE(contains(r.describe(), "re-check switched from")) << r.describe();
  EXPECT_TRUE(same_backend_everywhere(r.selected_backend()));
}

TEST_F(Autotune, CachedOverlappingDecisionIsReCheckedAgain) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // Two candidates that trade places round by round never separate; the cached decision keeps
  // its intervals, so a plan built from the cache re-checks too (a separated one would not).
  detail::test_hooks().skew = [](backend b, int round) {
    if (b == backend::mpi_pack) return round % 2 ? 1.0 : 1.2;
    if (b == backend::mpi_datatype) return round % 2 ? 1.2 : 1.0;
    return 5.0;
  };
  halo_options o = quick();
  o.tune.max_rounds = 8;
  auto const t = oracle_tensor(12);
  halo_plan first(t, o);
  ASSERT_TRUE(contains(first.describe(), "95% intervals overlapping")) << first.describe();
  halo_plan cached(t, o);
  std::string const d = cached.describe();
  EXPECT_TRUE(contains(d, "from the plan cache (memory)")) << d;
  EXPECT_EQ(cached.selected_backend(), first.selected_backend());
  EXPECT_TRUE(contains(d, "re-check against")) << d;
  EXPECT_EQ(run_forward(cached, t, 0, 12), 0);
  EXPECT_TRUE(same_backend_everywhere(cached.selected_backend()));
}

// Tuning times for the watch tests: mpi_persistent clearly first (10 ms), mpi_pack clearly
// second (50 ms), the rest far behind, so the intervals separate, there is no first re-check,
// and the watch runs against mpi_pack.
void separated_persistent_then_pack() {
  detail::test_hooks().skew = [](backend b, int) {
    return b == backend::mpi_persistent ? 0.01 : b == backend::mpi_pack ? 0.05 : 1.0;
  };
}

TEST_F(Autotune, CloseMediansAreReCheckedEvenWhenTheIntervalsSeparate) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  // 100 ms against 105 ms: constant times separate at once, but 5 % is a close call.
  detail::test_hooks().skew = [](backend b, int) {
    return b == backend::mpi_persistent ? 0.100 : b == backend::mpi_pack ? 0.105 : 1.0;
  };
  auto const t = oracle_tensor(17);
  halo_plan p(t, quick());
  std::string const d = p.describe();
  ASSERT_EQ(p.selected_backend(), backend::mpi_persistent) << d;
  EXPECT_TRUE(contains(d, "95% intervals separated")) << d;
  EXPECT_TRUE(contains(d, "re-check against mpi_pack (medians within 10 %)")) << d;
  EXPECT_EQ(run_forward(p, t, 0, 10), 0);
  EXPECT_TRUE(same_backend_everywhere(p.selected_backend()));
}

TEST_F(Autotune, WatchSwitchesWhenTheChoiceDriftsAndKeepsResultsCorrect) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  separated_persistent_then_pack();
  // From forward execution 20 on, mpi_persistent takes 200 ms, four times mpi_pack's 50 ms.
  detail::test_hooks().exec_skew = [](backend b, long long n) {
    if (b == backend::mpi_persistent) return n < 20 ? 0.01 : 0.2;
    return b == backend::mpi_pack ? 0.05 : 1.0;
  };
  auto const t = oracle_tensor(13);
  halo_plan p(t, quick());
  std::string const d0 = p.describe();
  ASSERT_EQ(p.selected_backend(), backend::mpi_persistent) << d0;
  EXPECT_TRUE(contains(d0, "re-check: not needed, intervals separated")) << d0;
  EXPECT_TRUE(contains(d0, "watching against mpi_pack")) << d0;
  EXPECT_TRUE(contains(d0, "0 check(s), 0 drift(s), next check after 16 forward")) << d0;
  // Check 1 after 16 executions is quiet (the next one 32 later); check 2, at 48, sees the
  // drift and starts a re-check, which switches after 10 more.
  EXPECT_EQ(run_forward(p, t, 0, 16), 0);
  EXPECT_TRUE(contains(p.describe(), "1 check(s), 0 drift(s), next check after 32"))
      << p.describe();
  EXPECT_EQ(run_forward(p, t, 16, 32), 0);
  std::string const d1 = p.describe();
  EXPECT_TRUE(contains(d1, "re-check against mpi_pack (the watch saw the choice drift: median "))
      << d1;
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent) << d1;
  // A reverse exchange during the re-check uses the current choice and is not timed.
  std::vector<double> x;
  fill_owned(t, x, 48);
  p.execute_reverse(tensor_view(t, x), reduce_op::max);
  EXPECT_EQ(run_forward(p, t, 48, 10), 0);
  std::string const d2 = p.describe();
  EXPECT_EQ(p.selected_backend(), backend::mpi_pack) << d2;
  EXPECT_TRUE(contains(d2, "re-check switched from mpi_persistent to mpi_pack (the watch saw"))
      << d2;
  EXPECT_TRUE(contains(d2, "watching against mpi_persistent")) << d2;
  EXPECT_TRUE(contains(d2, "2 check(s), 1 drift(s)")) << d2;
  auto const at = d2.find("re-check");
  EXPECT_TRUE(same_on_all_ranks(d2.substr(at, d2.find(" send peer(s)") - at))) << d2;
  EXPECT_TRUE(same_backend_everywhere(p.selected_backend()));
  // mpi_pack holds at 50 ms, below mpi_persistent's 200: the next check is quiet.
  EXPECT_EQ(run_forward(p, t, 58, 16), 0);
  EXPECT_EQ(p.selected_backend(), backend::mpi_pack) << p.describe();
  EXPECT_TRUE(contains(p.describe(), "3 check(s), 1 drift(s)")) << p.describe();
}

TEST_F(Autotune, WatchStaysQuietWhileTheChoiceHoldsAndChecksLessOften) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  separated_persistent_then_pack();
  // Slower than tuned (30 ms instead of 10) but still below mpi_pack's 50 ms: no re-check.
  detail::test_hooks().exec_skew = [](backend b, long long) {
    return b == backend::mpi_persistent ? 0.03 : 0.05;
  };
  auto const t = oracle_tensor(14);
  halo_plan p(t, quick());
  ASSERT_EQ(p.selected_backend(), backend::mpi_persistent) << p.describe();
  // Checks after 16, then 32 and 64 more executions.
  EXPECT_EQ(run_forward(p, t, 0, 16 + 32 + 64), 0);
  std::string const d = p.describe();
  EXPECT_EQ(p.selected_backend(), backend::mpi_persistent) << d;
  EXPECT_TRUE(contains(d, "3 check(s), 0 drift(s), next check after 128")) << d;
  EXPECT_FALSE(contains(d, "re-check against")) << d;
}

TEST_F(Autotune, WatchIsOffOnRequestAndBelowTwentyMicroseconds) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  separated_persistent_then_pack();
  halo_options o = quick();
  o.tune.watch = false;
  halo_plan off(oracle_tensor(15), o);
  EXPECT_TRUE(contains(off.describe(), "; watch: off")) << off.describe();
  EXPECT_FALSE(contains(off.describe(), "watching")) << off.describe();
  clear_plan_cache();
  setenv("HALOX_TUNE_WATCH", "off", 1);
  halo_plan env_off(oracle_tensor(15), quick());
  EXPECT_TRUE(contains(env_off.describe(), "; watch: off")) << env_off.describe();
  setenv("HALOX_TUNE_WATCH", "often", 1);
  try {
    halo_plan bad(oracle_tensor(15), quick());
    ADD_FAILURE() << "a bad HALOX_TUNE_WATCH was accepted";
  } catch (error const& e) {
    EXPECT_TRUE(contains(e.what(), "HALOX_TUNE_WATCH=\"often\" is not 0, 1, off or on"))
        << e.what();
  }
  unsetenv("HALOX_TUNE_WATCH");
  // A choice measured at a few microseconds is not watched.
  detail::test_hooks().skew = [](backend b, int) {
    return b == backend::mpi_persistent ? 0.0 : 1.0;
  };
  clear_plan_cache();
  halo_plan tiny(oracle_tensor(16), quick());
  std::string const d = tiny.describe();
  ASSERT_EQ(tiny.selected_backend(), backend::mpi_persistent) << d;
  // Its median as reported ("mpi_persistent 1.35 us [..."): oversubscribed ranks can take longer.
  auto const at = d.find("mpi_persistent ", d.find("intervals"));
  ASSERT_NE(at, std::string::npos) << d;
  std::istringstream is(d.substr(at + 15));
  double v = 0;
  std::string unit;
  is >> v >> unit;
  if (unit == "us" && v < 20)
    EXPECT_TRUE(contains(d, "; watch: not needed below 20 us")) << d;
  else
    EXPECT_TRUE(contains(d, "watching against")) << d;
}

TEST_F(Autotune, RecheckSettingsAreValidatedOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs messages (2+ ranks)";
  setenv("HALOX_TUNE_RECHECK", "sometimes", 1);
  try {
    halo_plan p(oracle_tensor(11), quick());
    ADD_FAILURE() << "a bad HALOX_TUNE_RECHECK was accepted";
  } catch (error const& e) {
    EXPECT_TRUE(contains(e.what(),
                         "HALOX_TUNE_RECHECK=\"sometimes\" is not one of off, on, always, switch"))
        << e.what();
  }
  unsetenv("HALOX_TUNE_RECHECK");
  halo_options o = quick();
  o.tune.max_rounds = 2; // below trials = 3
  try {
    halo_plan p(oracle_tensor(11), o);
    ADD_FAILURE() << "max_rounds < trials was accepted";
  } catch (error const& e) {
    EXPECT_TRUE(contains(e.what(), "max_rounds = 2")) << e.what();
  }
}

} // namespace
