#include "core/topology_probe.hpp"

#include <halox/config.hpp>

#if HALOX_HAS_HWLOC
#include <hwloc.h>
#endif

namespace halox::detail {

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
