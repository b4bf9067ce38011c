#pragma once
// UCX as a transport: each request is a UCP tag message on the context's UCX worker (see
// ucx_resources.hpp), without MPI. It moves contiguous buffers and iov lists (UCP's iov
// datatype), so the packing executor's iov strategy sends non-contiguous messages straight from
// the tensors. Endpoints are made at construction and warmed by `warm_up`, so that a new plan's
// first exchange is as fast as its hundredth.

#include "exec/transport.hpp"

#include <memory>

namespace halox::detail {

/// The UCX transport on `waits`. Collective over the plan's communicator the first time a
/// context needs UCX (see ucx_resources_of); throws `halox::error` (ucx_error) when UCX cannot
/// start or reach a peer.
[[nodiscard]] std::unique_ptr<transport> make_ucx_transport(wait_context& waits);

} // namespace halox::detail
