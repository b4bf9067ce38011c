// How many OpenMP threads a rank runs when nobody said: see apply_threads in main.cpp.
#pragma once

#include <string>

namespace trainer {

/// The default thread count of a rank started without --threads, --deterministic or
/// OMP_NUM_THREADS.
struct thread_default {
  int threads = 0;     ///< the CPUs this rank may use, divided among the node's ranks
  bool shared = false; ///< every local rank may use every CPU of the node (no binding)
  std::string note;    ///< why, for the header: "2 CPUs shared by 2 ranks on this node"
  /// Environment variable through which the re-executed program learns that OMP_NUM_THREADS
  /// is this default ("<threads>|<note>").
  static constexpr char const* note_variable = "HALOX_TRAIN_THREADS_DEFAULT";
};

/// The default from the CPUs this process may run on and the ranks the launcher starts on this
/// node (MPICH's Hydra, Open MPI and Slurm say so in the environment; 1 when none does).
thread_default default_threads();

/// "OMP_NUM_THREADS=1 (default: 2 CPUs shared by 2 ranks on this node)", or with what the user
/// set, or "unset" and OpenMP's own default.
std::string threads_text();

} // namespace trainer
