#pragma once
// Checkpoints hold the global parameters, the running statistics and the optimizer state,
// never anything about ranks or strategies, so a run can resume on another rank count or
// with other strategies. Rank 0 writes; rank 0 reads and broadcasts.
#include "params.hpp"

#include <mpi.h>

#include <string>

namespace trainer {

/// Where training stopped.
struct train_position {
  long step = 0; ///< steps done
};

/// Writes `ps` and `pos` to `path` (rank 0 only; collective so that every rank learns of a
/// failure). Writes to `path.tmp` first so an interrupted write never replaces a good file.
template <class T> void save_checkpoint(std::string const& path, std::string const& model,
                                        param_store<T> const& ps, train_position const& pos,
                                        MPI_Comm comm);

/// Reads `path` on rank 0, broadcasts it, and loads it into `ps` on every rank. Throws
/// `halox::error` on every rank when the file is missing or belongs to another model.
template <class T> train_position load_checkpoint(std::string const& path, std::string const& model,
                                                  param_store<T>& ps, MPI_Comm comm);

} // namespace trainer
