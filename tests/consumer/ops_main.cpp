// Uses the installed operators (halox::ops, found with find_package(halox COMPONENTS ops)): a
// distributed ReLU over MPI_COMM_WORLD, checked on every rank. Prints "consumer ops OK" on
// rank 0.
#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>

#include <mpi.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    halox::process_grid grid(MPI_COMM_WORLD, {size, 1, 1});
    halox::tensor_desc t(grid, {2 * size, 2, 3}, halox::dtype::float32);
    halox::ops::dist_relu<float> relu(t);
    std::vector<float> x(t.local_elements()), y(x.size(), 7.f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0) ? -1.f : static_cast<float>(i);
    relu.forward(halox::tensor_view(t, x), halox::tensor_view(t, y));
    bool ok = true;
    for (std::size_t i = 0; i < x.size(); ++i) ok = ok && y[i] == (x[i] > 0 ? x[i] : 0.f);
    int all_ok = 0, mine = ok ? 1 : 0;
    MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      std::fprintf(stderr, "rank %d: dist_relu gave a wrong result\n", grid.rank());
      rc = 1;
    } else if (grid.rank() == 0) {
      std::printf("consumer ops OK: dist_relu on %s over %d ranks\n", t.dist().str().c_str(), size);
    }
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
