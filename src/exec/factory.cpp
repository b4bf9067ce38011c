#include "exec/executor.hpp"
#include "exec/mpi/p2p_executor.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#if __has_include("exec/mpi/datatype_executor.hpp")
#include "exec/mpi/datatype_executor.hpp"
#define HALOX_HAVE_DATATYPE_EXECUTOR 1
#endif
#if __has_include("exec/mpi/collective_executor.hpp")
#include "exec/mpi/collective_executor.hpp"
#define HALOX_HAVE_COLLECTIVE_EXECUTOR 1
#endif
#if HALOX_HAS_CUDA && __has_include("exec/cuda/device_executors.hpp")
#include "exec/cuda/device_executors.hpp"
#define HALOX_HAVE_DEVICE_EXECUTORS 1
#endif

namespace halox::detail {

bool backend_available(backend b, memory_space mem) noexcept {
  bool const host = mem == memory_space::host;
  switch (b) {
  case backend::automatic: return true;
  case backend::mpi_pack:
  case backend::mpi_persistent: return host;
#ifdef HALOX_HAVE_DATATYPE_EXECUTOR
  case backend::mpi_datatype: return host;
#endif
#ifdef HALOX_HAVE_COLLECTIVE_EXECUTOR
  case backend::mpi_neighbor:
  case backend::alltoallv:
  case backend::alltoallw: return host;
#endif
#ifdef HALOX_HAVE_DEVICE_EXECUTORS
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
  case backend::mpi_pack: return std::make_unique<p2p_executor>(s, cfg, false);
  case backend::mpi_persistent: return std::make_unique<p2p_executor>(s, cfg, true);
#ifdef HALOX_HAVE_DATATYPE_EXECUTOR
  case backend::mpi_datatype: return make_datatype_executor(s, cfg);
#endif
#ifdef HALOX_HAVE_COLLECTIVE_EXECUTOR
  case backend::mpi_neighbor:
  case backend::alltoallv:
  case backend::alltoallw: return make_collective_executor(b, s, cfg);
#endif
#ifdef HALOX_HAVE_DEVICE_EXECUTORS
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
