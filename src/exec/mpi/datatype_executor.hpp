#pragma once
// mpi_datatype: MPI derived datatypes + MPI_Isend/MPI_Irecv. halox packs nothing; MPI's
// datatype engine gathers and scatters the strided regions straight from and into the buffers.

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the mpi_datatype executor of schedule `s` (host memory). Region datatypes are built
/// here; the per-peer struct types are built on the first `start` and rebuilt only when the slot
/// pointers change.
[[nodiscard]] std::unique_ptr<executor> make_datatype_executor(schedule const& s,
                                                               exec_config const& cfg);

} // namespace halox::detail
