#pragma once
/// \file mpi_handle.hpp
/// RAII owners for MPI handles. Releasing after MPI_Finalize is skipped (it would be an error
/// and the handle is gone with the library anyway).

#include <halox/detail/handle.hpp>
#include <mpi.h>

namespace halox::detail {

inline bool mpi_alive() noexcept {
  int fin = 0, init = 0;
  MPI_Finalized(&fin);
  MPI_Initialized(&init);
  return init && !fin;
}

struct comm_traits {
  static MPI_Comm null() noexcept { return MPI_COMM_NULL; }
  static void release(MPI_Comm& c) noexcept {
    if (mpi_alive() && c != MPI_COMM_WORLD && c != MPI_COMM_SELF) MPI_Comm_free(&c);
  }
};
struct datatype_traits {
  static MPI_Datatype null() noexcept { return MPI_DATATYPE_NULL; }
  static void release(MPI_Datatype& t) noexcept {
    if (mpi_alive()) MPI_Type_free(&t);
  }
};
struct request_traits {
  static MPI_Request null() noexcept { return MPI_REQUEST_NULL; }
  static void release(MPI_Request& r) noexcept {
    if (mpi_alive()) MPI_Request_free(&r);
  }
};
struct group_traits {
  static MPI_Group null() noexcept { return MPI_GROUP_NULL; }
  static void release(MPI_Group& g) noexcept {
    if (mpi_alive() && g != MPI_GROUP_EMPTY) MPI_Group_free(&g);
  }
};

/// Owned MPI communicator.
using unique_comm = unique_handle<MPI_Comm, comm_traits>;
/// Owned committed MPI datatype.
using unique_datatype = unique_handle<MPI_Datatype, datatype_traits>;
/// Owned (persistent) MPI request.
using unique_request = unique_handle<MPI_Request, request_traits>;
/// Owned MPI group.
using unique_group = unique_handle<MPI_Group, group_traits>;

} // namespace halox::detail
