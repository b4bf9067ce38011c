#pragma once
// Identity of the node a process runs on, for backends that work only between processes of one
// node (cma) or tune themselves for it (ucx).

#include <cstdint>

namespace halox::detail {

/// A hash of this node's host name and kernel boot id (read once per process). Equal ids are
/// necessary for sharing memory between processes, not sufficient (containers of one host with
/// separate pid namespaces): callers that need more test for it.
[[nodiscard]] std::uint64_t node_id();

} // namespace halox::detail
