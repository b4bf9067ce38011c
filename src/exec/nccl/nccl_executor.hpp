#pragma once
// The nccl backend (built only with HALOX_ENABLE_NCCL).

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the NCCL executor: collective over `cfg.comm` (creates an NCCL communicator of the
/// same ranks on each rank's current CUDA device).
[[nodiscard]] std::unique_ptr<executor> make_nccl_executor(schedule const& s,
                                                           exec_config const& cfg);

} // namespace halox::detail
