#pragma once
// The collective backends: one MPI call moves every message of the plan.
//
//   mpi_neighbor  pack + MPI_Ineighbor_alltoallv on a distributed-graph communicator whose
//                 sources are the receive peers and destinations the send peers;
//   alltoallv     pack + MPI_Ialltoallv over the whole plan communicator (zero counts for
//                 ranks that are not peers);
//   alltoallw     derived datatypes + MPI_Ialltoallw over the whole communicator, addressing
//                 the buffers through MPI_BOTTOM (halox packs nothing on the forward exchange).

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the executor of backend `b` (mpi_neighbor, alltoallv or alltoallw) for schedule `s`.
/// Collective over `cfg.comm` for mpi_neighbor (it creates the graph communicator).
[[nodiscard]] std::unique_ptr<executor> make_collective_executor(backend b, schedule const& s,
                                                                 exec_config const& cfg);

} // namespace halox::detail
