// default_threads(): the kernels' OpenMP threads when the caller chose none.
#include <halox/ops/provider.hpp>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops {
namespace {

// CPUs in this process's affinity mask: what OpenMP starts a thread for, by default.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// Ranks the launcher starts on this node, as it tells them before MPI_Init (1: none says).
int local_ranks() {
  for (char const* v : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (char const* s = std::getenv(v)) {
      int const n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

// OpenMP's thread count for the next parallel region: the CPUs of the affinity mask unless the
// program chose another with omp_set_num_threads (OMP_NUM_THREADS is checked before).
int openmp_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return usable_cpus();
#endif
}

std::string cpus_text(int n) { return std::to_string(n) + (n == 1 ? " CPU" : " CPUs"); }

} // namespace

thread_default default_threads() {
  thread_default d;
  d.cpus = usable_cpus();
  if (char const* v = std::getenv("OMP_NUM_THREADS"); v && *v) {
    d.reason = std::string("OMP_NUM_THREADS=") + v;
    return d;
  }
  int const cpus = d.cpus, ranks = local_ranks();
  long const online = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus <= 0) {
    d.reason = "the CPUs this process may use are unknown";
  } else if (cpus < online) { // the launcher (or the user) chose this rank's CPUs
    d.reason = "bound to " + cpus_text(cpus);
  } else if (ranks <= 1) {
    d.reason = "the only rank on this node";
  } else if (int const set = openmp_threads(); set != cpus) { // omp_set_num_threads was called
    d.reason = "the program set " + std::to_string(set) + " OpenMP threads";
  } else {
    d.threads = std::max(1, cpus / ranks);
    d.reason = cpus_text(cpus) + " shared by " + std::to_string(ranks) + " ranks on this node";
  }
  return d;
}

} // namespace halox::ops
