// Uses only the installed public API: a process grid and a tensor descriptor over
// MPI_COMM_WORLD, one ownership query checked on every rank. Prints "consumer OK" on rank 0.
#include <halox/halox.hpp>

#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    halox::process_grid grid(MPI_COMM_WORLD, {size, 1});
    halox::tensor_desc t(grid, {4 * size, 6}, halox::dtype::float32,
                         {halox::dim_options::halo(1), halox::dim_options{}});
    // Rank r owns rows [4r, 4r + 4) and allocates one halo row on each side.
    halox::box const b = t.owned_box();
    bool const ok = b.lo[0] == 4 * grid.rank() && b.hi[0] == 4 * grid.rank() + 4 &&
                    t.owner({4 * grid.rank(), 5}) == grid.rank() && t.local_shape()[0] == 6 &&
                    t.local_elements() == 36;
    int all_ok = 0, mine = ok ? 1 : 0;
    MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      std::fprintf(stderr, "rank %d: unexpected ownership for %s\n", grid.rank(),
                   t.dist().str().c_str());
      rc = 1;
    } else if (grid.rank() == 0) {
      std::printf("consumer OK: halox %s (%s), %s on %d ranks\n", HALOX_VERSION_STRING,
                  HALOX_MPI_FLAVOUR, t.dist().str().c_str(), size);
    }
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
