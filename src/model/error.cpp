#include <halox/error.hpp>

#include <mpi.h>

#include <sstream>

namespace halox {

char const* to_string(errc c) noexcept {
  switch (c) {
  case errc::invalid_argument: return "invalid_argument";
  case errc::inconsistent_ranks: return "inconsistent_ranks";
  case errc::mpi_error: return "mpi_error";
  case errc::cuda_error: return "cuda_error";
  case errc::nccl_error: return "nccl_error";
  case errc::invalid_state: return "invalid_state";
  case errc::unsupported: return "unsupported";
  case errc::internal: return "internal";
  case errc::timeout: return "timeout";
  case errc::ucx_error: return "ucx_error";
  case errc::peer_failed: return "peer_failed";
  case errc::out_of_memory: return "out_of_memory";
  }
  return "unknown";
}

namespace {
int world_rank() noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string decorate(errc code, int rank, std::string const& msg, char const* call,
                     char const* file, int line) {
  std::ostringstream os;
  os << "halox error [" << to_string(code) << "] on rank " << rank << ": " << msg;
  if (call && *call) os << " (at " << call << ", " << file << ":" << line << ")";
  return os.str();
}
} // namespace

error::error(errc code, std::string message, char const* call, char const* file, int line)
    : std::runtime_error(decorate(code, world_rank(), message, call, file, line)), code_(code),
      rank_(world_rank()), message_(std::move(message)), call_(call ? call : ""),
      file_(file ? file : ""), line_(line) {}

namespace detail {
void throw_mpi_error(int code, char const* call, char const* file, int line) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) len = 0;
  throw error(errc::mpi_error,
              "MPI call failed with code " + std::to_string(code) + ": " + std::string(buf, len),
              call, file, line);
}
void throw_error(errc code, std::string const& msg, char const* call, char const* file, int line) {
  throw error(code, msg, call, file, line);
}
} // namespace detail
} // namespace halox
