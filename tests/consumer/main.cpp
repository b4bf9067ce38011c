// Uses only the installed public API: a process grid and a tensor descriptor over
// MPI_COMM_WORLD, one ownership query and one deep-halo schedule checked on every rank. Prints
// "consumer OK" on rank 0.
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
    bool ok = b.lo[0] == 4 * grid.rank() && b.hi[0] == 4 * grid.rank() + 4 &&
              t.owner({4 * grid.rank(), 5}) == grid.rank() && t.local_shape()[0] == 6 &&
              t.local_elements() == 36;
    // A 3-step deep halo of a radius-1 stencil along rows: halo 3, step 1 grows the owned rows
    // by 2 on each side that has a neighbour (local coordinates: the owned rows start at 3).
    halox::deep_halo_schedule s(grid, {4 * size, 6}, halox::dtype::float32, {1, 0}, 3);
    halox::box const r1 = s.valid_region(1);
    ok = ok && s.desc().local_shape()[0] == 10 && s.exchange_every() == 3 &&
         r1.lo[0] == (grid.rank() == 0 ? 3 : 1) && r1.hi[0] == (grid.rank() == size - 1 ? 7 : 9);
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
