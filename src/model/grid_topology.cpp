// process_grid's topology-aware placement: finds where each process runs (MPI shared-memory
// groups, or emulated nodes; hwloc sockets), maps the grid with map_grid and renumbers the
// grid's communicator to follow it.
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/topology.hpp>

#include "common/agreement.hpp"
#include "common/environment.hpp"
#include "model/topology_probe.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace halox {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t x) { return (h ^ x) * 1099511628211ull; }

// The node count to emulate: `opt` when positive, else HALOX_FAKE_NODES when set, else 0 (real
// nodes). Throws naming the bad value (called inside the grid's collective check).
int fake_node_count(int opt, int size) {
  std::string const range = "1 to " + std::to_string(size) + " (the number of processes)";
  HALOX_REQUIRE(opt >= 0 && opt <= size, errc::invalid_argument,
                "grid_options::fake_nodes " + std::to_string(opt) +
                    " is out of range; use 0 (the real nodes) or " + range);
  if (opt > 0) return opt;
  return detail::settings::fake_nodes(size).value_or(0);
}

// Node of `rank` among `nodes` balanced runs of consecutive ranks (the first `size % nodes` one
// rank larger).
int fake_node_of(int rank, int size, int nodes) {
  int const q = size / nodes, r = size % nodes;
  return rank < r * (q + 1) ? rank / (q + 1) : r + (rank - r * (q + 1)) / q;
}

} // namespace

process_grid::process_grid(MPI_Comm comm, std::vector<int> dims, grid_options const& opts)
    : process_grid(comm, std::move(dims)) {
  reorder_by_topology(opts);
}

process_grid process_grid::create(MPI_Comm comm, std::vector<int> dims,
                                  std::vector<index_t> const& shape,
                                  std::vector<int> const& halo_lo, std::vector<int> const& halo_hi,
                                  std::vector<bool> const& periodic, grid_options const& opts) {
  process_grid g = create(comm, std::move(dims), shape, halo_lo, halo_hi, periodic);
  grid_options o = opts;
  o.periodic = periodic;
  // The shape and halos passed choose_grid's checks, so this does not throw.
  if (o.face_bytes.empty() && o.reorder != topology_reorder::none)
    o.face_bytes = halo_face_bytes(shape, g.dims(), halo_lo, halo_hi, o.element_size);
  g.reorder_by_topology(o);
  return g;
}

topology_report const& process_grid::topology() const noexcept {
  static topology_report const none;
  return topology_ ? *topology_ : none;
}

void process_grid::reorder_by_topology(grid_options const& opts) {
  std::size_t const nd = dims_.size();
  bool const on = opts.reorder == topology_reorder::nodes;
  int fake = 0;
  detail::collective_check(
      comm(), "process_grid (grid_options)",
      [&] {
        HALOX_REQUIRE(opts.reorder == topology_reorder::none || on, errc::invalid_argument,
                      "grid_options::reorder " + std::to_string(static_cast<int>(opts.reorder)) +
                          " is not a topology_reorder value; use none or nodes");
        HALOX_REQUIRE(opts.face_bytes.empty() || opts.face_bytes.size() == nd,
                      errc::invalid_argument,
                      "grid_options::face_bytes has " + std::to_string(opts.face_bytes.size()) +
                          " entries for a grid of rank " + std::to_string(nd) +
                          "; give one per dimension or none");
        for (std::size_t d = 0; d < opts.face_bytes.size(); ++d)
          HALOX_REQUIRE(std::isfinite(opts.face_bytes[d]) && opts.face_bytes[d] >= 0,
                        errc::invalid_argument,
                        "grid_options::face_bytes " + std::to_string(opts.face_bytes[d]) +
                            " on dim " + std::to_string(d) + " must be finite and not negative");
        HALOX_REQUIRE(opts.periodic.empty() || opts.periodic.size() == nd, errc::invalid_argument,
                      "grid_options::periodic has " + std::to_string(opts.periodic.size()) +
                          " entries for a grid of rank " + std::to_string(nd) +
                          "; give one per dimension or none");
        if (on) fake = fake_node_count(opts.fake_nodes, size_);
      },
      [&] {
        std::uint64_t h = 1469598103934665603ull;
        h = mix(h, static_cast<std::uint64_t>(opts.reorder));
        h = mix(h, static_cast<std::uint64_t>(fake));
        for (double w : opts.face_bytes) {
          std::uint64_t bits = 0;
          std::memcpy(&bits, &w, sizeof bits);
          h = mix(h, bits);
        }
        for (bool p : opts.periodic) h = mix(h, p ? 2 : 1);
        return h;
      });
  if (!on) return;

  // Where every process runs: (node, socket), all-gathered in the caller's rank order.
  int place[2] = {0, detail::bound_socket()};
  if (place[1] < 0) place[1] = 0; // unknown: one socket per node
  if (fake > 0) {
    place[0] = fake_node_of(rank_, size_, fake);
  } else {
    MPI_Comm shm = MPI_COMM_NULL;
    HALOX_MPI_CHECK(MPI_Comm_split_type(comm(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shm));
    communicator const node_comm(shm);
    HALOX_MPI_CHECK(MPI_Allreduce(&rank_, &place[0], 1, MPI_INT, MPI_MIN, node_comm.get()));
  }
  std::vector<int> all(2 * static_cast<std::size_t>(size_));
  HALOX_MPI_CHECK(MPI_Allgather(place, 2, MPI_INT, all.data(), 2, MPI_INT, comm()));
  std::vector<rank_place> machine(size_);
  for (int r = 0; r < size_; ++r) machine[r] = {all[2 * r], all[2 * r + 1]};

  std::vector<double> const w =
      opts.face_bytes.empty() ? std::vector<double>(nd, 1.0) : opts.face_bytes;
  auto report = std::make_shared<topology_report>();
  report->requested = true;
  report->mapping = map_grid(machine, dims_, w, opts.periodic);
  if (report->mapping.reordered) {
    int position = 0;
    for (int g = 0; g < size_; ++g)
      if (report->mapping.process_of[g] == rank_) position = g;
    MPI_Comm split = MPI_COMM_NULL;
    HALOX_MPI_CHECK(MPI_Comm_split(comm(), 0, position, &split));
    auto c = std::make_shared<communicator>(split);
    HALOX_MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
    HALOX_MPI_CHECK(MPI_Comm_rank(split, &rank_));
    comm_ = std::move(c);
  }
  topology_ = std::move(report);
}

} // namespace halox
