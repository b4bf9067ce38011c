#pragma once
// Where the calling process runs, as far as the process grid's reordering needs it. hwloc stays
// inside topology_probe.cpp.

namespace halox::detail {

/// Logical index of the socket (hwloc package) holding every core the calling process is bound
/// to; -1 when unknown (no hwloc, no binding, or a binding that spans several sockets).
[[nodiscard]] int bound_socket();

} // namespace halox::detail
