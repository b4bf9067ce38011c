#pragma once
// The GPU executors, as the backend table makes them. This header is CUDA-free: the table is
// compiled in every build and names these makers only when CUDA is on.
//
// Every GPU backend but device_mpi_datatype is the device packing executor over a transport
// (exec/transport.hpp): CUDA kernels pack each message into a packed stream in device
// workspace, the transport moves it, kernels unpack it. A host-driven transport (MPI) moves it
// from device memory or from a pinned host copy (staging); a stream-ordered one (NCCL) moves it
// on the caller's stream.

#include "exec/executor.hpp"
#include "exec/transport.hpp"

#include <memory>

namespace halox::detail {

/// Where a host-driven transport reads and writes the packed stream.
enum class staging {
  none,       ///< in device memory (the transport accepts device pointers)
  pinned_host ///< in a pinned host copy, copied on the stream before sends and after receives
};

/// The device packing executor for `preset` over the transport `make` builds.
[[nodiscard]] std::unique_ptr<executor>
make_device_packing_executor(backend preset, schedule const& s, exec_config const& cfg,
                             staging where, transport_maker make);

/// The MPI point-to-point transport on device pointers: throws `halox::error` (unsupported) when
/// the plan's communicator has more than one rank and MPI says it does not accept device
/// pointers (it would crash in it).
[[nodiscard]] std::unique_ptr<transport> make_cuda_aware_mpi_transport(wait_context& waits);

/// device_mpi_datatype: device buffers handed to MPI with derived datatypes.
[[nodiscard]] std::unique_ptr<executor>
make_device_datatype_executor(backend preset, schedule const& s, exec_config const& cfg);

/// Throws `halox::error` (unsupported) when `comm` has more than one rank and MPI says it does
/// not accept device pointers (backend `b` would crash in it).
void require_cuda_aware_mpi(MPI_Comm comm, backend b);

} // namespace halox::detail
