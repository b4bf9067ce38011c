#pragma once
// NCCL as a transport (built only with HALOX_ENABLE_NCCL): stream-ordered ncclSend / ncclRecv
// of contiguous device byte ranges, every message of an exchange in one NCCL group on the
// exchange's stream.

#include "exec/transport.hpp"

#include <memory>

namespace halox::detail {

/// The transport of the nccl backend. Collective over the plan's context the first time: it
/// creates the context's NCCL communicator (on each rank's current CUDA device), which every
/// later plan of the context shares.
[[nodiscard]] std::unique_ptr<transport> make_nccl_transport(wait_context& waits);

} // namespace halox::detail
