// halox::ops::default_threads(): the kernels' OpenMP threads when the caller chose none, from
// OMP_NUM_THREADS, the launcher's ranks on the node and the process's affinity mask.
#include <halox/ops/conv.hpp>
#include <halox/ops/provider.hpp>

#include <gtest/gtest.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;

using vars = std::map<std::string, std::optional<std::string>>;

// Sets (or unsets) the variables default_threads() reads for one test and restores them.
class scoped_env {
public:
  explicit scoped_env(vars const& set) {
    for (char const* v : {"OMP_NUM_THREADS", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "SLURM_NTASKS_PER_NODE"}) {
      if (char const* old = std::getenv(v))
        saved_[v] = old;
      else
        saved_[v] = std::nullopt;
      unsetenv(v);
    }
    for (auto const& [k, v] : set)
      if (v) setenv(k.c_str(), v->c_str(), 1);
  }
  ~scoped_env() {
    for (auto const& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;

private:
  std::map<std::string, std::optional<std::string>> saved_;
};

int affinity_cpus() {
  cpu_set_t s;
  CPU_ZERO(&s);
  sched_getaffinity(0, sizeof s, &s);
  return CPU_COUNT(&s);
}

bool whole_node() { return affinity_cpus() >= sysconf(_SC_NPROCESSORS_ONLN); }

} // namespace

TEST(OpsThreads, OmpNumThreadsDecides) {
  scoped_env e(vars{{"OMP_NUM_THREADS", "3"}, {"MPI_LOCALNRANKS", "4"}});
  auto const d = ops::default_threads();
  EXPECT_EQ(d.threads, 0);
  EXPECT_EQ(d.reason, "OMP_NUM_THREADS=3");
  EXPECT_EQ(d.cpus, affinity_cpus());
}

TEST(OpsThreads, UnboundRanksShareTheNode) {
  if (!whole_node()) GTEST_SKIP() << "this process is bound to part of the node";
  int const cpus = affinity_cpus();
  for (char const* var : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    for (int ranks : {2, 3, 2 * cpus + 1}) {
      SCOPED_TRACE(std::string(var) + "=" + std::to_string(ranks));
      scoped_env e(vars{{var, std::to_string(ranks)}});
      auto const d = ops::default_threads();
      EXPECT_EQ(d.threads, std::max(1, cpus / ranks));
      EXPECT_EQ(d.reason, std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") + " shared by " +
                              std::to_string(ranks) + " ranks on this node");
    }
}

TEST(OpsThreads, AloneOrBoundKeepsOpenMPsDefault) {
  {
    scoped_env e(vars{{"MPI_LOCALNRANKS", "1"}});
    auto const d = ops::default_threads();
    EXPECT_EQ(d.threads, 0);
    if (whole_node()) EXPECT_EQ(d.reason, "the only rank on this node");
  }
  {
    scoped_env e(vars{});
    EXPECT_EQ(ops::default_threads().threads, 0); // no launcher says how many share the node
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: nothing to bind to";
  cpu_set_t all, one;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  scoped_env e(vars{{"MPI_LOCALNRANKS", "2"}});
  auto const d = ops::default_threads();
  sched_setaffinity(0, sizeof all, &all);
  EXPECT_EQ(d.threads, 0);
  EXPECT_EQ(d.cpus, 1);
  EXPECT_EQ(d.reason, "bound to 1 CPU");
}

#ifdef _OPENMP
// A count the program set with omp_set_num_threads is its choice, as OMP_NUM_THREADS would be.
TEST(OpsThreads, AProgramsOwnOpenMPCountIsKept) {
  if (!whole_node()) GTEST_SKIP() << "this process is bound to part of the node";
  scoped_env e(vars{{"MPI_LOCALNRANKS", "2"}});
  int const before = omp_get_max_threads(), cpus = affinity_cpus();
  omp_set_num_threads(cpus + 1);
  auto const d = ops::default_threads();
  omp_set_num_threads(before);
  EXPECT_EQ(d.threads, 0);
  EXPECT_EQ(d.reason, "the program set " + std::to_string(cpus + 1) + " OpenMP threads");
  if (before == cpus) EXPECT_EQ(ops::default_threads().threads, std::max(1, cpus / 2));
}
#endif

// A kernel object reports the count it was given; the default applies inside its calls.
TEST(OpsThreads, LocalKernelsKeepTheRequestedCount) {
  scoped_env e(vars{{"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference, 0).threads(), 0);
  EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference, 3).threads(), 3);
}

// describe() of the distributed operators says how many threads their kernels run and why.
TEST(OpsThreads, KernelsDescribeTheirThreads) {
  EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference, 3).threads_description(),
            "3 threads (chosen by the caller)");
  EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference, 1).threads_description(),
            "1 thread (chosen by the caller)");
  {
    scoped_env e(vars{{"OMP_NUM_THREADS", "2"}});
    EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference).threads_description(),
              "OpenMP's default threads (OMP_NUM_THREADS=2)");
  }
  if (!whole_node()) GTEST_SKIP() << "this process is bound to part of the node";
  scoped_env e(vars{{"MPI_LOCALNRANKS", "2"}});
  auto const d = ops::default_threads();
  if (d.threads == 0) GTEST_SKIP() << d.reason; // e.g. the program set a thread count
  EXPECT_EQ(ops::local_kernels<double>(ops::compute_provider::reference).threads_description(),
            std::to_string(d.threads) + (d.threads == 1 ? " thread" : " threads") +
                " (default: " + d.reason + ")");
}

// The reference weight gradient sums one partial per thread of its team. Called first with two
// threads and then from a thread of a caller's team (where its own region gets one thread), it
// must sum only the partial of the call at hand, not the second thread's of the first call.
TEST(OpsThreads, WeightGradientInsideACallersTeamSumsOnlyItsOwnPartials) {
#ifndef _OPENMP
  GTEST_SKIP() << "built without OpenMP";
#else
  std::vector<halox::index_t> const xs{2, 8, 24, 24}, ws{8, 8, 3, 3}, ys{2, 8, 24, 24};
  ops::conv_params const p{{1}, {1}, {1}, {1}};
  std::vector<double> x(static_cast<std::size_t>(ops::element_count(xs))),
      dy(static_cast<std::size_t>(ops::element_count(ys)));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>((i * 7) % 13) - 6.0;
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>((i * 5) % 11) - 5.0;
  std::vector<double> dw_team(static_cast<std::size_t>(ops::element_count(ws))), dw_inner = dw_team;
  int const saved = omp_get_max_threads();
  omp_set_num_threads(2);
  ops::conv_backward_weights<double>({x.data(), xs}, {dy.data(), ys}, {dw_team.data(), ws}, p);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) // the thread that made the first call
      ops::conv_backward_weights<double>({x.data(), xs}, {dy.data(), ys}, {dw_inner.data(), ws}, p);
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 0; i < dw_team.size(); ++i)
    ASSERT_NEAR(dw_inner[i], dw_team[i], 1e-9 * (1 + std::abs(dw_team[i]))) << "dw[" << i << "]";
#endif
}
