#pragma once
// ucx and ucx_iov: the schedule's messages travel as UCP tag messages on the context's UCX
// worker, without MPI. `ucx` packs each peer's regions into one contiguous message (like
// mpi_pack); `ucx_iov` hands UCP the regions' contiguous runs as an iov list, straight from and
// to the tensors. Either sends a message that is one contiguous region in place.

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the ucx (`iov` false) or ucx_iov executor. Collective over the plan's communicator the
/// first time a context needs UCX (see ucx_transport_of); throws `halox::error` (ucx_error)
/// when UCX cannot start or reach a peer.
[[nodiscard]] std::unique_ptr<executor> make_ucx_executor(schedule const& s, exec_config const& cfg,
                                                          bool iov);

} // namespace halox::detail
