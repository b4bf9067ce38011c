#pragma once
// Constructors of the individual GPU executors (dispatched by make_device_executor).

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// cuda_aware_mpi (`staged` false) or staged_mpi (`staged` true).
[[nodiscard]] std::unique_ptr<executor>
make_mpi_device_executor(schedule const& s, exec_config const& cfg, bool staged);
/// device_mpi_datatype.
[[nodiscard]] std::unique_ptr<executor> make_device_datatype_executor(schedule const& s,
                                                                      exec_config const& cfg);
/// Throws `halox::error` (unsupported) when `comm` has more than one rank and MPI says it does
/// not accept device pointers (backend `b` would crash in it).
void require_cuda_aware_mpi(MPI_Comm comm, backend b);
/// Checks that `bytes` fits MPI's int count.

} // namespace halox::detail
