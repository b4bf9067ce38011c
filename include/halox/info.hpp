#pragma once
/// \file info.hpp
/// What this build of halox contains and what it runs on.

#include <string>

namespace halox {

/// Multi-line description of the build: halox version, MPI library version string, enabled
/// backends (CUDA, NCCL, UCX, hwloc), when hwloc is enabled the node topology, and the HALOX_*
/// environment variables set in this process (`describe_environment()`).
[[nodiscard]] std::string build_info();

/// The MPI library's own version string (MPI_Get_library_version), first line only.
[[nodiscard]] std::string mpi_library_version();

} // namespace halox
