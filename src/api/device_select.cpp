#include "api/device_select.hpp"
#include "common/agreement.hpp"
#include "model/topology_probe.hpp"

#include <halox/config.hpp>
#include <halox/detail/mpi_handle.hpp>
#include <halox/device.hpp>
#include <halox/error.hpp>

#if HALOX_HAS_CUDA
#include "exec/device_probe.hpp"
#endif

#include <cstddef>
#include <string>

namespace halox {
namespace detail {
namespace {

// Bus ids of this process's visible devices, or empty with `problem` saying why and what to do.
std::vector<std::string> visible_devices(std::string& problem) {
#if HALOX_HAS_CUDA
  auto ids = cuda_device_bus_ids(problem);
  if (ids.empty())
    problem = "no CUDA device visible (" + problem +
              "); run on a node with a GPU, and check CUDA_VISIBLE_DEVICES and the driver";
  return ids;
#else
  problem = "halox was built without CUDA; reconfigure it with -DHALOX_ENABLE_CUDA=ON to choose "
            "a device";
  return {};
#endif
}

// Every rank throws errc::unsupported with the message of the lowest rank that has a problem.
void agree_on_problem(MPI_Comm comm, std::string const& problem) {
  auto const [first, text] =
      detail::lowest_problem(problem, comm, 0.0, "choose_device (agreeing on the problems)");
  if (first >= 0)
    throw error(errc::unsupported, "choose_device: rank " + std::to_string(first) +
                                       " cannot choose a device: " + text);
}

void put_list(std::vector<int>& out, std::vector<int> const& xs) {
  out.push_back(static_cast<int>(xs.size()));
  out.insert(out.end(), xs.begin(), xs.end());
}

std::vector<int> get_list(int const*& p) {
  int const n = *p++;
  std::vector<int> xs(p, p + n);
  p += n;
  return xs;
}

} // namespace

node_view probe_node(MPI_Comm comm) {
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                "choose_device(MPI_COMM_NULL); pass the communicator of the processes that "
                "choose their devices together");
  std::string problem;
  auto const ids = visible_devices(problem);
  agree_on_problem(comm, problem);
  auto const where = probe_locality(ids);

  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  unique_comm node;
  HALOX_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, node.out()));
  int local = 0, local_size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(node.get(), &local));
  HALOX_MPI_CHECK(MPI_Comm_size(node.get(), &local_size));
  int label = rank; // the node's label: the rank (in comm) of its node-local rank 0
  HALOX_MPI_CHECK(MPI_Bcast(&label, 1, MPI_INT, 0, node.get()));

  // Each process's view as ints: cpus, then per device its bus id (as chars) and cpus.
  std::vector<int> mine;
  put_list(mine, where.cpus);
  mine.push_back(static_cast<int>(ids.size()));
  for (std::size_t d = 0; d < ids.size(); ++d) {
    put_list(mine, std::vector<int>(ids[d].begin(), ids[d].end()));
    put_list(mine, where.device_cpus[d]);
  }
  int const count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(local_size)), offsets(counts.size() + 1, 0);
  HALOX_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, node.get()));
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  std::vector<int> all(static_cast<std::size_t>(offsets.back()));
  HALOX_MPI_CHECK(MPI_Allgatherv(mine.data(), count, MPI_INT, all.data(), counts.data(),
                                 offsets.data(), MPI_INT, node.get()));

  node_view view;
  view.me = local;
  view.note = where.note;
  for (int r = 0; r < local_size; ++r) {
    int const* p = all.data() + offsets[static_cast<std::size_t>(r)];
    process_seen s;
    s.node = label;
    s.local_rank = r;
    s.cpus = get_list(p);
    int const n = *p++;
    for (int d = 0; d < n; ++d) {
      auto const chars = get_list(p);
      device_seen dev;
      dev.bus_id.assign(chars.begin(), chars.end());
      dev.cpus = get_list(p);
      s.devices.push_back(std::move(dev));
    }
    view.processes.push_back(std::move(s));
  }
  return view;
}

} // namespace detail

device_choice choose_device(MPI_Comm comm) {
  auto const view = detail::probe_node(comm);
  auto const picks = detail::pick_devices(view.processes);
  auto const& mine = picks[static_cast<std::size_t>(view.me)];
  device_choice out{mine.device, mine.reason};
  if (!view.note.empty()) out.reason += " (" + view.note + ")";
  return out;
}

int closest_device(MPI_Comm comm) { return choose_device(comm).device; }

} // namespace halox
