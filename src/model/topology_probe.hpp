#pragma once
// Where the calling process runs, as far as the process grid's reordering needs it. hwloc stays
// inside topology_probe.cpp.

#include <string>
#include <vector>

namespace halox::detail {

/// The cpus the calling process is bound to and the PCI locality of some devices, as hwloc sees
/// them (cpu lists sorted; empty when not known).
struct locality {
  /// Bound cpus; empty when the process is not bound to a strict subset of the node's cpus, the
  /// binding is unknown, or the build has no hwloc.
  std::vector<int> cpus;
  /// Per requested bus id: the cpus of the PCI device's nearest non-I/O ancestor; empty when
  /// hwloc does not see that device (or the build has no hwloc).
  std::vector<std::vector<int>> device_cpus;
  /// Why `cpus` or a device's locality is empty, when hwloc itself failed or is absent.
  std::string note;
};

/// Probes the calling process's binding and the locality of the PCI devices `bus_ids`
/// ("0000:41:00.0", as cudaDeviceGetPCIBusId writes them).
[[nodiscard]] locality probe_locality(std::vector<std::string> const& bus_ids);

/// Logical index of the socket (hwloc package) holding every core the calling process is bound
/// to; -1 when unknown (no hwloc, no binding, or a binding that spans several sockets).
[[nodiscard]] int bound_socket();

} // namespace halox::detail
