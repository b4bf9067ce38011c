#pragma once
// Whether the MPI library accepts device pointers, as far as it can say.

#include "common/environment.hpp"

#include <mpi.h>

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

namespace halox::detail {

/// 1 when MPI says it handles CUDA device pointers, 0 when it says it does not, -1 when it
/// cannot tell. The environment variable HALOX_CUDA_AWARE_MPI (1/on or 0/off) overrides the answer.
/// Call between MPI_Init and MPI_Finalize.
inline int mpi_cuda_support() {
  if (auto const said = settings::cuda_aware_mpi()) return *said ? 1 : 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() ? 1 : 0; // Open MPI built with CUDA: ask at run time
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  return 0; // Open MPI built without CUDA
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0; // MPICH >= 4: built with CUDA and GPU support enabled at run time
  if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) != MPI_SUCCESS) return -1;
  return yes ? 1 : 0;
#else
  return -1;
#endif
}

} // namespace halox::detail
