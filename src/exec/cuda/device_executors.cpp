#include "exec/cuda/device_executors.hpp"

#include "exec/cuda/device_backends.hpp"
#include "exec/cuda/mpi_cuda_support.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#include <string>

#if HALOX_HAS_NCCL
#include "exec/nccl/nccl_executor.hpp"
#endif

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

std::unique_ptr<executor> make_device_executor(backend b, schedule const& s,
                                               exec_config const& cfg) {
  HALOX_REQUIRE(cfg.memory == memory_space::device, errc::unsupported,
                std::string("backend ") + to_string(b) + " runs on device memory only");
  switch (b) {
  case backend::cuda_aware_mpi: return make_mpi_device_executor(s, cfg, false);
  case backend::staged_mpi: return make_mpi_device_executor(s, cfg, true);
  case backend::device_mpi_datatype: return make_device_datatype_executor(s, cfg);
  case backend::nccl:
#if HALOX_HAS_NCCL
    return make_nccl_executor(s, cfg);
#else
    throw error(errc::unsupported, "halox was built without NCCL (HALOX_ENABLE_NCCL=OFF)");
#endif
  default: break;
  }
  throw error(errc::unsupported, std::string("backend ") + to_string(b) + " is not a GPU backend");
}

} // namespace halox::detail
