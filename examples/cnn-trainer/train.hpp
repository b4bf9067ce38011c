#pragma once
// The training loop: data, forward, backward, gradient all-reduces, optimizer, evaluation,
// progress output, JSON log and checkpoints.
#include "model.hpp"
#include "options.hpp"

#include <mpi.h>

namespace trainer {

/// Trains `m` as `o` says, in element type T (float or double). Collective over `comm`.
/// Returns the process exit status (the same on every rank).
template <class T> int train(options const& o, model_spec const& m, MPI_Comm comm);

} // namespace trainer
