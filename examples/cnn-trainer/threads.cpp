#include "threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace trainer {
namespace {

// CPUs in this process's affinity mask (what OpenMP starts a thread for, by default).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

int local_ranks() {
  for (char const* v : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (char const* s = std::getenv(v)) {
      int const n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

} // namespace

thread_default default_threads() {
  thread_default d;
  int const cpus = usable_cpus(), ranks = local_ranks();
  long const online = sysconf(_SC_NPROCESSORS_ONLN);
  d.threads = std::max(1, cpus / ranks);
  // A rank bound to fewer CPUs than the node has got them from its launcher: keep them.
  d.shared = ranks > 1 && cpus > 0 && cpus >= online;
  d.note = std::to_string(cpus) + " CPU" + (cpus == 1 ? "" : "s") + " shared by " +
           std::to_string(ranks) + " ranks on this node";
  return d;
}

std::string threads_text() {
  char const* v = std::getenv("OMP_NUM_THREADS");
  if (!v) {
    int const cpus = usable_cpus();
    return "OMP_NUM_THREADS=unset (OpenMP's default: one thread per CPU this rank may use, " +
           std::to_string(cpus) + ")";
  }
  std::string text = std::string("OMP_NUM_THREADS=") + v;
  if (char const* n = std::getenv(thread_default::note_variable)) {
    std::string const note = n;
    auto const bar = note.find('|');
    if (bar != std::string::npos && note.compare(0, bar, v) == 0)
      text += " (default: " + note.substr(bar + 1) + ")";
  }
  return text;
}

} // namespace trainer
