#pragma once
// The GPU executors: cuda_aware_mpi, staged_mpi, nccl (NCCL builds) and device_mpi_datatype.
// All are stream-ordered: `start(stream)` enqueues the pack after the caller's earlier work on
// that stream, `wait(stream)` enqueues the unpack, and later work on the stream sees the halos.
// None synchronises the whole device.

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the device executor of `b` (cuda_aware_mpi, staged_mpi, nccl or
/// device_mpi_datatype) on the current CUDA device. Throws `halox::error` (unsupported) for any
/// other backend, for host memory, and for nccl in a build without NCCL.
[[nodiscard]] std::unique_ptr<executor> make_device_executor(backend b, schedule const& s,
                                                             exec_config const& cfg);

} // namespace halox::detail
