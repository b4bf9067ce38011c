#include "exec/executor.hpp"

#include <halox/backend.hpp>
#include <halox/error.hpp>

namespace halox {

namespace {
constexpr backend all_backends[] = {backend::automatic,
                                    backend::mpi_datatype,
                                    backend::mpi_pack,
                                    backend::mpi_persistent,
                                    backend::mpi_pipeline,
                                    backend::mpi_neighbor,
                                    backend::alltoallv,
                                    backend::alltoallw,
                                    backend::cuda_aware_mpi,
                                    backend::staged_mpi,
                                    backend::nccl,
                                    backend::device_mpi_datatype,
                                    backend::ucx,
                                    backend::ucx_iov,
                                    backend::cma};
}

char const* to_string(backend b) noexcept {
  switch (b) {
  case backend::automatic: return "auto";
  case backend::mpi_datatype: return "mpi_datatype";
  case backend::mpi_pack: return "mpi_pack";
  case backend::mpi_persistent: return "mpi_persistent";
  case backend::mpi_neighbor: return "mpi_neighbor";
  case backend::alltoallv: return "alltoallv";
  case backend::alltoallw: return "alltoallw";
  case backend::cuda_aware_mpi: return "cuda_aware_mpi";
  case backend::staged_mpi: return "staged_mpi";
  case backend::nccl: return "nccl";
  case backend::device_mpi_datatype: return "device_mpi_datatype";
  case backend::ucx: return "ucx";
  case backend::ucx_iov: return "ucx_iov";
  case backend::cma: return "cma";
  case backend::mpi_pipeline: return "mpi_pipeline";
  }
  return "unknown";
}

backend backend_from_string(std::string const& name) {
  if (name == "automatic" || name == "auto") return backend::automatic;
  if (name == "p2p") return backend::mpi_pack;
  std::string names;
  for (backend b : all_backends) {
    if (name == to_string(b)) return b;
    names += std::string(names.empty() ? "" : ", ") + to_string(b);
  }
  throw error(errc::invalid_argument,
              "unknown backend '" + name + "'; use one of " + names + " (or p2p = mpi_pack)");
}

std::vector<backend> host_backends() {
  std::vector<backend> out;
  for (backend b : all_backends)
    if (b != backend::automatic && detail::backend_available(b, memory_space::host))
      out.push_back(b);
  return out;
}

std::vector<backend> device_backends() {
  std::vector<backend> out;
  for (backend b : all_backends)
    if (b != backend::automatic && detail::backend_available(b, memory_space::device))
      out.push_back(b);
  return out;
}

} // namespace halox
