// The halox demo: describes a small 2-D tensor over 4 ranks and prints what each rank owns.
#include <halox/halox.hpp>

#include <cstdio>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    auto grid = halox::process_grid::create(MPI_COMM_WORLD, {0, 0}, {12, 10}, {1, 1}, {1, 1});
    halox::tensor_desc t(grid, {12, 10}, halox::dtype::float64,
                         {halox::dim_options::halo(1), halox::dim_options::halo(1)});
    if (grid.rank() == 0) std::printf("%s%s\n", halox::build_info().c_str(), t.dist().str().c_str());
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
