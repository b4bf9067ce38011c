#include <halox/config.hpp>
#include <halox/info.hpp>
#include <halox/settings.hpp>

#include <mpi.h>

#include <sstream>
#include <string>

#if HALOX_HAS_HWLOC
#include <hwloc.h>
#endif
#if HALOX_HAS_UCX
#include <ucp/api/ucp.h>
#endif
#if HALOX_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace halox {

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  std::string s(buf, len);
  auto const nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string build_info() {
  std::ostringstream os;
  os << "halox " << HALOX_VERSION_STRING << " (MPI flavour " << HALOX_MPI_FLAVOUR << ")\n";
  os << "  MPI library: " << mpi_library_version() << "\n";
  os << "  CUDA: " << (HALOX_HAS_CUDA ? "yes" : "no");
#if HALOX_HAS_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  os << " (" << devices << " device(s) visible)";
#endif
  os << ", NCCL: " << (HALOX_HAS_NCCL ? "yes" : "no");
#if HALOX_HAS_UCX
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  os << ", UCX: " << major << "." << minor << "." << release;
#else
  os << ", UCX: no";
#endif
  os << ", cma: " << (HALOX_HAS_CMA ? "yes" : "no");
  os << "\n";
#if HALOX_HAS_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) == 0) {
    if (hwloc_topology_load(topo) == 0) {
      os << "  node: " << hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE) << " package(s), "
         << hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) << " NUMA node(s), "
         << hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) << " core(s), "
         << hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU) << " hardware thread(s)\n";
    }
    hwloc_topology_destroy(topo);
  }
#endif
  // What the environment changes, so that a report or benchmark log shows how it ran.
  std::string const env = describe_environment();
  if (!env.empty()) {
    os << "  environment:\n";
    std::istringstream lines(env);
    for (std::string line; std::getline(lines, line);) os << "    " << line << "\n";
  }
  return os.str();
}

} // namespace halox
