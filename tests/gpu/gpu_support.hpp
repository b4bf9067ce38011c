#pragma once
// What the GPU tests share: whether they can run here, and why not. Every decision is taken
// collectively (all ranks skip together), since a plan built by some ranks only would hang.

#include <halox/backend.hpp>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <string>

namespace halox::gpu_test {

/// Empty when a CUDA device is usable, else why not ("no CUDA device visible: ...").
inline std::string device_problem() {
  int n = 0;
  cudaError_t const rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess)
    return std::string("no CUDA device visible: cudaGetDeviceCount returned ") +
           cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
  if (n == 0) return "no CUDA device visible: cudaGetDeviceCount reported 0 devices";
  return {};
}

/// Number of visible devices (0 when none).
inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/// `reason` of the first rank of `comm` that has one, on every rank (empty when none has).
inline std::string any_rank(std::string const& reason, MPI_Comm comm = MPI_COMM_WORLD) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int const mine = reason.empty() ? size : rank;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return {};
  std::string r = reason;
  int len = static_cast<int>(r.size());
  MPI_Bcast(&len, 1, MPI_INT, first, comm);
  r.resize(static_cast<std::size_t>(len));
  MPI_Bcast(r.data(), len, MPI_CHAR, first, comm);
  return r;
}

/// Makes device (world rank mod device count) current; call only when a device exists.
inline void select_device() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaSetDevice(rank % device_count());
}

} // namespace halox::gpu_test
