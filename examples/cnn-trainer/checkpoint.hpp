#pragma once
// Checkpoints hold the global parameters, the running statistics and the optimizer state,
// never anything about ranks or strategies, so a run can resume on another rank count or
// with other strategies. Rank 0 writes; rank 0 reads and broadcasts.
#include "params.hpp"

#include <mpi.h>

#include <string>
#include <string_view>

namespace trainer {

/// Where training stopped.
struct train_position {
  long step = 0; ///< steps done
};

/// The file's bytes (format 2: header with version, payload length and CRC-32C, then payload).
template <class T> std::string checkpoint_bytes(std::string const& model, param_store<T> const& ps,
                                                train_position const& pos);

/// Checks `data` (the bytes of `path`) and loads it into `ps`: magic, version, payload length
/// and checksum first, then every count and length against the bytes that remain, and the
/// parameters against the model's, before any value is copied. Throws `halox::error` naming
/// the file, what is wrong and the fix. Pure: no MPI, no file access (but for naming
/// `path.prev` in the fix when it exists).
template <class T> train_position parse_checkpoint(std::string_view data, std::string const& path,
                                                   std::string const& model, param_store<T>& ps);

/// What to do about a damaged `path`: resume from `path.prev` when it exists.
std::string checkpoint_fix(std::string const& path);

/// Writes `ps` and `pos` to `path` (rank 0 only; collective so that every rank learns of a
/// failure). Writes `path.tmp` and flushes it to the disk, keeps the previous checkpoint as
/// `path.prev`, then renames: `path` always names a complete checkpoint.
template <class T> void save_checkpoint(std::string const& path, std::string const& model,
                                        param_store<T> const& ps, train_position const& pos,
                                        MPI_Comm comm);

/// Reads `path` on rank 0, broadcasts it, and loads it into `ps` on every rank. Throws
/// `halox::error` on every rank when the file is missing or belongs to another model.
template <class T> train_position load_checkpoint(std::string const& path, std::string const& model,
                                                  param_store<T>& ps, MPI_Comm comm);

} // namespace trainer
