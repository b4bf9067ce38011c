#include "plan/device_choice.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>

namespace halox::detail {

std::string cpu_list(std::vector<int> const& cpus) {
  if (cpus.empty()) return "none";
  std::ostringstream os;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    os << (i ? "," : "") << cpus[i];
    if (j > i) os << '-' << cpus[j];
    i = j + 1;
  }
  return os.str();
}

namespace {

int shared_cpus(std::vector<int> const& a, std::vector<int> const& b) {
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return static_cast<int>(both.size());
}

std::string name(process_seen const& p, int device) {
  return "device " + std::to_string(device) + " (PCI " + p.devices[device].bus_id + ")";
}

} // namespace

std::vector<device_pick> pick_devices(std::vector<process_seen> const& processes) {
  std::vector<device_pick> picks(processes.size());
  // Processes of each node in node-local rank order.
  std::map<int, std::vector<std::size_t>> nodes;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    auto const& p = processes[i];
    HALOX_REQUIRE(!p.devices.empty(), errc::invalid_argument,
                  "process " + std::to_string(i) + " (node " + std::to_string(p.node) +
                      ", node-local rank " + std::to_string(p.local_rank) +
                      ") sees no CUDA device; make a device visible to every process");
    nodes[p.node].push_back(i);
  }
  for (auto& [node, members] : nodes) {
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return processes[a].local_rank < processes[b].local_rank;
    });
    for (std::size_t k = 0; k < members.size(); ++k)
      HALOX_REQUIRE(processes[members[k]].local_rank == static_cast<int>(k), errc::invalid_argument,
                    "node " + std::to_string(node) + " has node-local ranks that are not 0.." +
                        std::to_string(members.size() - 1) + " (found " +
                        std::to_string(processes[members[k]].local_rank) + " at position " +
                        std::to_string(k) + "); give each process of a node its own local rank");

    std::map<std::string, int> taken; // processes of the node per device (by bus id)
    for (std::size_t const i : members) {
      auto const& p = processes[i];
      int const n = static_cast<int>(p.devices.size());
      auto& pick = picks[i];
      auto const unknown = std::find_if(p.devices.begin(), p.devices.end(),
                                        [](auto const& d) { return d.cpus.empty(); });
      if (p.cpus.empty() || unknown != p.devices.end()) {
        pick.device = p.local_rank % n;
        pick.reason =
            name(p, pick.device) + ": node-local rank " + std::to_string(p.local_rank) +
            " modulo " + std::to_string(n) + " device(s), because " +
            (p.cpus.empty()
                 ? std::string("the process is not bound to a subset of its node's "
                               "cpus (bind ranks, e.g. mpiexec --bind-to core or srun "
                               "--cpu-bind=cores)")
                 : "the locality of device " + std::to_string(unknown - p.devices.begin()) +
                       " (PCI " + unknown->bus_id +
                       ") is unknown (hwloc does not see its PCI device)");
        ++taken[p.devices[pick.device].bus_id];
        continue;
      }
      std::vector<int> overlap(n);
      for (int d = 0; d < n; ++d) overlap[d] = shared_cpus(p.cpus, p.devices[d].cpus);
      int const most = *std::max_element(overlap.begin(), overlap.end());
      int best = -1, closest = 0;
      for (int d = 0; d < n; ++d) {
        if (overlap[d] != most) continue;
        ++closest;
        if (best < 0 || taken[p.devices[d].bus_id] < taken[p.devices[best].bus_id]) best = d;
      }
      int const before = taken[p.devices[best].bus_id]++;
      pick.device = best;
      std::ostringstream os;
      os << name(p, best) << ": ";
      if (most == 0)
        os << "no device is local to the process's cpus " << cpu_list(p.cpus) << "; of all " << n
           << " device(s)";
      else
        os << "one of " << closest << " device(s) local to the process's cpus " << cpu_list(p.cpus)
           << " (sharing " << most << " cpu(s));";
      os << " the least used on its node (" << before
         << " process(es) with a lower node-local rank took it), node-local rank " << p.local_rank;
      pick.reason = os.str();
    }
  }
  return picks;
}

} // namespace halox::detail
