#pragma once
// What every executor is built from. In a header of its own because both the executor and its
// wait context (exec/wait_context.hpp), which transports see without the executor, read it.

#include "exec/context_state.hpp"

#include <halox/backend.hpp>

#include <mpi.h>

#include <memory>

namespace halox::detail {

/// What every executor is built from.
struct exec_config {
  std::shared_ptr<context_state> ctx; ///< the plan's context (communicator, allocator, NCCL)
  MPI_Comm comm = MPI_COMM_NULL;      ///< the communicator messages travel on (ctx->comm)
  int tag = 0;                        ///< the plan's message tag on it
  memory_space memory = memory_space::host;
  double fill_value = 0.0;    ///< value for the schedule's fill regions
  double timeout = 0.0;       ///< seconds a wait may last before it throws (0: unbounded)
  char const* label = "plan"; ///< what the plan is, for error messages ("halo_plan", ...)
  /// The plan's watch for peers' failure notices, tested by every wait loop (null: none).
  peer_watch* watch = nullptr;
};

} // namespace halox::detail
