#include "exec/executor.hpp"
#include "exec/mpi/p2p_executor.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#include "exec/mpi/collective_executor.hpp"
#include "exec/mpi/datatype_executor.hpp"
#if HALOX_HAS_CUDA
#include "exec/cuda/device_executors.hpp"
#endif
#if HALOX_HAS_UCX
#include "exec/ucx/ucx_executor.hpp"
#endif
#if HALOX_HAS_CMA
#include "exec/cma/cma_executor.hpp"
#endif

namespace halox::detail {

bool backend_available(backend b, memory_space mem) noexcept {
  bool const host = mem == memory_space::host;
  switch (b) {
  case backend::automatic: return true;
  case backend::mpi_pack:
  case backend::mpi_persistent:
  case backend::mpi_pipeline: return host;
  case backend::mpi_datatype:
  case backend::mpi_neighbor:
  case backend::alltoallv:
  case backend::alltoallw: return host;
#if HALOX_HAS_UCX
  // Host memory only: device buffers would need UCX built with CUDA support and device pack
  // kernels in front of it, which this backend does not have.
  case backend::ucx:
  case backend::ucx_iov: return host;
#endif
#if HALOX_HAS_CMA
  // Host memory only: process_vm_readv reads another process's virtual memory, not a GPU's.
  case backend::cma: return host;
#endif
#if HALOX_HAS_CUDA
  case backend::cuda_aware_mpi:
  case backend::staged_mpi:
  case backend::device_mpi_datatype: return !host;
  case backend::nccl: return !host && HALOX_HAS_NCCL;
#endif
  default: return false;
  }
}

std::unique_ptr<executor> make_executor(backend b, schedule const& s, exec_config const& cfg) {
  HALOX_REQUIRE(backend_available(b, cfg.memory) && b != backend::automatic, errc::unsupported,
                std::string("backend ") + to_string(b) + " is not available for " +
                    (cfg.memory == memory_space::host ? "host" : "device") +
                    " memory in this build; see halox::host_backends() / device_backends()");
  switch (b) {
  case backend::mpi_pack: return std::make_unique<p2p_executor>(s, cfg, p2p_mode::plain);
  case backend::mpi_persistent: return std::make_unique<p2p_executor>(s, cfg, p2p_mode::persistent);
  case backend::mpi_pipeline: return std::make_unique<p2p_executor>(s, cfg, p2p_mode::pipelined);
  case backend::mpi_datatype: return make_datatype_executor(s, cfg);
  case backend::mpi_neighbor:
  case backend::alltoallv:
  case backend::alltoallw: return make_collective_executor(b, s, cfg);
#if HALOX_HAS_UCX
  case backend::ucx: return make_ucx_executor(s, cfg, false);
  case backend::ucx_iov: return make_ucx_executor(s, cfg, true);
#endif
#if HALOX_HAS_CMA
  case backend::cma: return make_cma_executor(s, cfg);
#endif
#if HALOX_HAS_CUDA
  case backend::cuda_aware_mpi:
  case backend::staged_mpi:
  case backend::nccl:
  case backend::device_mpi_datatype: return make_device_executor(b, s, cfg);
#endif
  default: break;
  }
  throw error(errc::internal, std::string("no executor for backend ") + to_string(b));
}

} // namespace halox::detail
