#pragma once
// The probing half of `halox::choose_device`: what the processes of the caller's node see, as the
// pure chooser (plan/device_choice.hpp) takes it. Exposed so the GPU tests can compare
// choose_device with the chooser on the same inputs.

#include "plan/device_choice.hpp"

#include <mpi.h>

#include <string>
#include <vector>

namespace halox::detail {

/// What the processes sharing the calling process's node saw, in node-local rank order
/// (`processes[me]` is the caller's). Collective over `comm`; throws `halox::error`
/// (errc::unsupported) on every rank when any rank cannot see a CUDA device or the build has no
/// CUDA.
struct node_view {
  std::vector<process_seen> processes;
  int me = 0;
  std::string note; ///< why the caller's locality is unknown, when hwloc failed or is absent
};
[[nodiscard]] node_view probe_node(MPI_Comm comm);

} // namespace halox::detail
