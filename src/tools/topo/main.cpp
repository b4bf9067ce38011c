// halox-topo: where each MPI rank runs, and what is wrong with it.
//
//   mpiexec -n 4 halox-topo
//
// Rank 0 prints one line per rank:
//   rank R: node HOST socket S numa N cpus LIST cores C gpu DEV nic DEV device D
// (socket and numa: the packages and NUMA nodes the rank's cpus lie in, "-" when it spans none;
// cpus: the processing units it is bound to, as a list; gpu and nic: the closest such device
// hwloc sees, or "none"; device: the CUDA device index halox::closest_device picks for the rank,
// or "none"), then "device: rank R: WHY" lines saying how each rank's device was chosen or why
// none could be ("device: all ranks: WHY" when every rank has the same reason), then a
// "warning:" line for every rank not bound to a subset of its node's cpus and for every pair of
// bound ranks on one node whose cpus overlap (the first 20).
// Warnings are not errors: the exit status is 0 unless MPI or hwloc fails.
#include <halox/device.hpp>
#include <halox/error.hpp>

#include <hwloc.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int record_size = 2048; // one rank's fields, NUL-separated in a fixed-size record

std::string list_of(hwloc_const_bitmap_t set) {
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || s == nullptr) return "?";
  std::string out = *s ? s : "-";
  std::free(s);
  return out;
}

// Logical indices of the objects of `type` whose cpus intersect `set`, e.g. "0" or "0,1".
std::string objects_in(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_bitmap_t set) {
  std::string out;
  int const n = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, static_cast<unsigned>(i));
    if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, set))
      out += (out.empty() ? "" : ",") + std::to_string(o->logical_index);
  }
  return out.empty() ? "-" : out;
}

bool is_gpu(hwloc_obj_t o) {
  auto const t = o->attr->osdev.type;
  return t == HWLOC_OBJ_OSDEV_GPU || t == HWLOC_OBJ_OSDEV_COPROC;
}
bool is_nic(hwloc_obj_t o) {
  auto const t = o->attr->osdev.type;
  return t == HWLOC_OBJ_OSDEV_NETWORK || t == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

// The OS device of the kind whose locality (cpus of its nearest non-I/O ancestor) shares the most
// cpus with `set`, ties to the most local one; "none" when hwloc sees no such device.
std::string closest(hwloc_topology_t topo, hwloc_const_bitmap_t set, bool (*kind)(hwloc_obj_t)) {
  std::string best = "none";
  int best_shared = -1, best_width = 0;
  hwloc_bitmap_t tmp = hwloc_bitmap_alloc();
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    if (!kind(o) || !o->name) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
    if (!anc || !anc->cpuset) continue;
    hwloc_bitmap_and(tmp, anc->cpuset, set);
    int const shared = hwloc_bitmap_weight(tmp), width = hwloc_bitmap_weight(anc->cpuset);
    if (shared > best_shared || (shared == best_shared && width < best_width)) {
      best = o->name;
      best_shared = shared;
      best_width = width;
    }
  }
  hwloc_bitmap_free(tmp);
  return best;
}

struct record {
  std::string host, socket, numa, cpus, cores, gpu, nic, bound, device, why;
};

std::vector<char> pack(record const& r) {
  std::vector<char> buf(record_size, '\0');
  std::string all;
  for (auto const* f : {&r.host, &r.socket, &r.numa, &r.cpus, &r.cores, &r.gpu, &r.nic, &r.bound,
                        &r.device, &r.why})
    all += *f + '\0';
  std::memcpy(buf.data(), all.data(), std::min<std::size_t>(all.size(), record_size - 1));
  return buf;
}

record unpack(char const* p) {
  record r;
  char const* end = p + record_size;
  for (auto* f : {&r.host, &r.socket, &r.numa, &r.cpus, &r.cores, &r.gpu, &r.nic, &r.bound,
                  &r.device, &r.why}) {
    std::size_t const n = strnlen(p, static_cast<std::size_t>(end - p));
    f->assign(p, n);
    p += std::min<std::size_t>(n + 1, static_cast<std::size_t>(end - p));
  }
  return r;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  record me;
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  me.host = std::string(host, static_cast<std::size_t>(len));

  hwloc_topology_t topo;
  int status = 0;
  if (hwloc_topology_init(&topo) != 0) {
    std::fprintf(stderr, "halox-topo: rank %d: hwloc_topology_init failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    std::fprintf(stderr, "halox-topo: rank %d: hwloc_topology_load failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(topo);
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0 || hwloc_bitmap_iszero(set))
    hwloc_bitmap_copy(set, all); // binding unknown: as good as unbound
  me.bound = hwloc_bitmap_isincluded(all, set) ? "0" : "1";
  me.cpus = list_of(set);
  me.socket = objects_in(topo, HWLOC_OBJ_PACKAGE, set);
  me.numa = objects_in(topo, HWLOC_OBJ_NUMANODE, set);
  int cores = 0;
  for (hwloc_obj_t c = nullptr;
       (c = hwloc_get_next_obj_covering_cpuset_by_type(topo, set, HWLOC_OBJ_CORE, c)) != nullptr;)
    ++cores;
  me.cores = std::to_string(cores);
  me.gpu = closest(topo, set, is_gpu);
  me.nic = closest(topo, set, is_nic);
  // Collective: every rank reaches it, and every rank gets a device or the same error.
  try {
    auto const choice = halox::choose_device(MPI_COMM_WORLD);
    me.device = std::to_string(choice.device);
    me.why = choice.reason;
  } catch (halox::error const& e) {
    me.device = "none";
    me.why = "none: " + e.message();
  }

  auto const mine = pack(me);
  std::vector<char> gathered(rank == 0 ? static_cast<std::size_t>(record_size) * size : 0);
  MPI_Gather(mine.data(), record_size, MPI_CHAR, gathered.data(), record_size, MPI_CHAR, 0,
             MPI_COMM_WORLD);

  if (rank == 0) {
    std::vector<record> rs;
    std::map<std::string, int> hosts;
    for (int r = 0; r < size; ++r) {
      rs.push_back(unpack(gathered.data() + static_cast<std::size_t>(r) * record_size));
      hosts.emplace(rs.back().host, 0);
    }
    std::printf("halox-topo: %d rank(s) on %zu node(s)\n", size, hosts.size());
    for (int r = 0; r < size; ++r) {
      auto const& x = rs[r];
      std::printf("rank %d: node %s socket %s numa %s cpus %s cores %s gpu %s nic %s device %s\n",
                  r, x.host.c_str(), x.socket.c_str(), x.numa.c_str(), x.cpus.c_str(),
                  x.cores.c_str(), x.gpu.c_str(), x.nic.c_str(), x.device.c_str());
    }
    bool const same =
        std::all_of(rs.begin(), rs.end(), [&](record const& x) { return x.why == rs[0].why; });
    if (same && size > 1)
      std::printf("device: all ranks: %s\n", rs[0].why.c_str());
    else
      for (int r = 0; r < size; ++r) std::printf("device: rank %d: %s\n", r, rs[r].why.c_str());
    int warnings = 0;
    for (int r = 0; r < size; ++r)
      if (rs[r].bound != "1") {
        std::printf("warning: rank %d is not bound (cpus %s on %s): it may migrate between "
                    "cores and sockets; bind ranks, e.g. mpiexec --bind-to core or srun "
                    "--cpu-bind=cores\n",
                    r, rs[r].cpus.c_str(), rs[r].host.c_str());
        ++warnings;
      }
    int shared = 0;
    hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc(), both = hwloc_bitmap_alloc();
    for (int r = 0; r < size; ++r)
      for (int s = r + 1; s < size; ++s) {
        if (rs[r].host != rs[s].host || rs[r].bound != "1" || rs[s].bound != "1") continue;
        if (hwloc_bitmap_list_sscanf(a, rs[r].cpus.c_str()) != 0 ||
            hwloc_bitmap_list_sscanf(b, rs[s].cpus.c_str()) != 0)
          continue;
        hwloc_bitmap_and(both, a, b);
        if (!hwloc_bitmap_iszero(both) && ++shared <= 20) {
          std::printf("warning: ranks %d and %d share cpus %s on %s\n", r, s, list_of(both).c_str(),
                      rs[r].host.c_str());
          ++warnings;
        }
      }
    if (shared > 20) {
      std::printf("warning: %d more pairs of ranks share cpus\n", shared - 20);
      ++warnings;
    }
    hwloc_bitmap_free(a);
    hwloc_bitmap_free(b);
    hwloc_bitmap_free(both);
    std::printf("halox-topo: %d warning(s)\n", warnings);
    std::fflush(stdout);
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  MPI_Finalize();
  return status;
}
