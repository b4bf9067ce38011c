#include "model/topology_probe.hpp"

#include <halox/config.hpp>

#if HALOX_HAS_HWLOC
#include <hwloc.h>
#endif

#include <cstddef>

namespace halox::detail {

#if HALOX_HAS_HWLOC
namespace {

std::vector<int> to_list(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (hwloc_bitmap_weight(set) < 0) return out; // infinite set: no meaningful list
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

} // namespace
#endif

locality probe_locality(std::vector<std::string> const& bus_ids) {
  locality out;
  out.device_cpus.resize(bus_ids.size());
#if HALOX_HAS_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    out.note = "hwloc_topology_init failed";
    return out;
  }
  // PCI devices are filtered out by default; keep them to find each GPU's locality.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    out.note = "hwloc_topology_load failed";
    hwloc_topology_destroy(topo);
    return out;
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(topo);
  if (set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0 &&
      !hwloc_bitmap_iszero(set) && !hwloc_bitmap_isincluded(all, set))
    out.cpus = to_list(set);
  if (set) hwloc_bitmap_free(set);
  for (std::size_t i = 0; i < bus_ids.size(); ++i) {
    hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus_ids[i].c_str());
    hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : nullptr;
    if (anc && anc->cpuset) out.device_cpus[i] = to_list(anc->cpuset);
  }
  hwloc_topology_destroy(topo);
#else
  out.note = "halox was built without hwloc";
#endif
  return out;
}

int bound_socket() {
#if HALOX_HAS_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return -1;
  int socket = -1;
  if (hwloc_topology_load(topo) == 0) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0 &&
        !hwloc_bitmap_iszero(set)) {
      int found = 0;
      hwloc_obj_t pkg = nullptr;
      while ((pkg = hwloc_get_next_obj_covering_cpuset_by_type(topo, set, HWLOC_OBJ_PACKAGE,
                                                               pkg)) != nullptr) {
        ++found;
        socket = static_cast<int>(pkg->logical_index);
      }
      if (found != 1) socket = -1;
    }
    if (set) hwloc_bitmap_free(set);
  }
  hwloc_topology_destroy(topo);
  return socket;
#else
  return -1;
#endif
}

} // namespace halox::detail
