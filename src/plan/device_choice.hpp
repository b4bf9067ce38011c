#pragma once
// Which CUDA device each process should use, from what each process saw of its node: its cpus,
// its visible devices and their PCI locality. Pure (no MPI, no CUDA, no hwloc), so it is
// unit-tested on simulated nodes; `halox::choose_device` probes the inputs and calls it.

#include <string>
#include <vector>

namespace halox::detail {

/// One device as a process sees it.
struct device_seen {
  std::string bus_id;    ///< PCI bus id: the same device has the same id in every process
  std::vector<int> cpus; ///< cpus of its nearest non-I/O ancestor (sorted); empty: not known
};

/// What one process saw. `devices[i]` is its CUDA device index i.
struct process_seen {
  int node = 0;          ///< node label: equal for processes that share a node
  int local_rank = 0;    ///< rank among the processes of its node (0..n-1)
  std::vector<int> cpus; ///< cpus it is bound to (sorted); empty: not bound, or not known
  std::vector<device_seen> devices;
};

/// The device chosen for one process, and why.
struct device_pick {
  int device = -1; ///< index into the process's `devices`
  std::string reason;
};

/// Chooses a device for every process. On each node, processes are taken in node-local rank
/// order; each takes, among the devices closest to its cpus (those sharing the most cpus with
/// it), the one that the fewest processes of its node have taken so far (ties: the lowest
/// index). So processes with the same closest devices go round-robin over them by node-local
/// rank, and devices are shared evenly when there are more processes than devices. A process
/// that is not bound, or that sees a device whose locality is unknown, takes its node-local rank
/// modulo its device count (the reason says which). Devices are matched across processes by bus
/// id, so each process may see its own subset (CUDA_VISIBLE_DEVICES). Throws `halox::error`
/// (errc::invalid_argument) when a process sees no device or node-local ranks are not 0..n-1.
[[nodiscard]] std::vector<device_pick> pick_devices(std::vector<process_seen> const& processes);

/// Cpu list as "0-3,8" (empty: "none").
[[nodiscard]] std::string cpu_list(std::vector<int> const& cpus);

} // namespace halox::detail
