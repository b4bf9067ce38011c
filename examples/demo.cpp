// The halox demo: a small 2-D tensor over the ranks of MPI_COMM_WORLD (run it with 4).
// It describes the tensor, lets halox choose the process grid, fills each rank's owned cells
// with their global row-major index, exchanges the halos (faces and corners, periodic in the
// second dimension) and prints, rank by rank, what it owns, whom it talks to and its local
// buffer with the halo cells filled in. Then it runs the reverse exchange and checks it.
#include <halox/halox.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Prints each rank's text in rank order (gathered to rank 0).
void print_ordered(std::string const& text, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int len = static_cast<int>(text.size());
  std::vector<int> lens(size), displs(size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += lens[r];
  }
  std::string all(rank == 0 ? total : 0, ' ');
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              comm);
  if (rank == 0) std::fputs(all.c_str(), stdout);
}

std::string box_str(halox::box const& b) {
  std::ostringstream os;
  for (int d = 0; d < b.nd; ++d) os << (d ? " x " : "") << "[" << b.lo[d] << "," << b.hi[d] << ")";
  return b.empty() ? std::string("nothing") : os.str();
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    std::vector<halox::index_t> const shape{12, 10};
    // Rows: halo 1, not periodic (zero-filled at the global edge). Columns: halo 1, periodic.
    std::vector<halox::dim_options> const opts{halox::dim_options::halo(1),
                                               halox::dim_options::halo(1, true)};
    auto grid = halox::process_grid::create(MPI_COMM_WORLD, {0, 0}, shape, {1, 1}, {1, 1});
    halox::tensor_desc t(grid, shape, halox::dtype::float64, opts);
    if (grid.rank() == 0)
      std::printf("%s\ntensor %s on a %dx%d process grid (chosen by halox for %d ranks)\n\n",
                  halox::build_info().c_str(), t.dist().str().c_str(), grid.dims()[0],
                  grid.dims()[1], grid.size());

    std::vector<double> buf(t.local_elements(), -1.0);
    auto const owned = t.owned_box();
    for (auto i = owned.lo[0]; i < owned.hi[0]; ++i)
      for (auto j = owned.lo[1]; j < owned.hi[1]; ++j)
        buf[t.local_offset({i, j})] = static_cast<double>(i * shape[1] + j);

    halox::halo_options ho;
    ho.boundary = halox::boundary_fill::constant; // zero padding at the non-periodic edge
    halox::halo_plan plan(t, ho);
    plan.execute(halox::tensor_view(t, buf));

    std::ostringstream os;
    auto const c = grid.coords();
    os << "rank " << grid.rank() << " at grid (" << c[0] << "," << c[1] << ") owns "
       << box_str(owned) << "; local buffer " << t.local_shape()[0] << "x" << t.local_shape()[1]
       << " with halos\n  " << plan.describe().substr(plan.describe().find("backend"));
    auto const ls = t.local_shape();
    for (halox::index_t i = 0; i < ls[0]; ++i) {
      os << "   ";
      for (halox::index_t j = 0; j < ls[1]; ++j) {
        bool const is_halo = i == 0 || j == 0 || i == ls[0] - 1 || j == ls[1] - 1;
        char cell[16];
        std::snprintf(cell, sizeof cell, is_halo ? " (%3.0f)" : "  %3.0f ",
                      buf[i * t.strides()[0] + j]);
        os << cell;
      }
      os << "\n";
    }
    os << "\n";
    print_ordered(os.str(), MPI_COMM_WORLD);

    // Reverse exchange: every halo copy of a cell adds 1 to its owner (a gradient's view).
    for (auto& v : buf) v = 1.0;
    plan.execute_reverse(halox::tensor_view(t, buf), halox::reduce_op::sum);
    double local_sum = 0, total = 0;
    for (auto i = owned.lo[0]; i < owned.hi[0]; ++i)
      for (auto j = owned.lo[1]; j < owned.hi[1]; ++j) local_sum += buf[t.local_offset({i, j})];
    MPI_Allreduce(&local_sum, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (grid.rank() == 0)
      std::printf("reverse exchange (sum): owned cells now total %.0f = %lld cells + every halo "
                  "copy that maps back to an owner\n",
                  total, static_cast<long long>(shape[0] * shape[1]));
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
