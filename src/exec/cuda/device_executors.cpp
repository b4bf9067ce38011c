#include "exec/cuda/device_executors.hpp"

#include "exec/cuda/mpi_cuda_support.hpp"

#include <halox/error.hpp>

#include <string>

namespace halox::detail {

void require_cuda_aware_mpi(MPI_Comm comm, backend b) {
  int size = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size == 1) return; // MPI never sees a device pointer
  HALOX_REQUIRE(mpi_cuda_support() != 0, errc::unsupported,
                std::string("backend ") + to_string(b) +
                    " hands device pointers to MPI, but this MPI library reports that it is not "
                    "CUDA-aware; use staged_mpi or nccl, or set HALOX_CUDA_AWARE_MPI=1 if it is");
}

} // namespace halox::detail
