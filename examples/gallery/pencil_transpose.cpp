// pencil_transpose: the transpose of a pencil-decomposed 3-D FFT, with redistribute_plan.
//
// Shows: two distributions of one global tensor over the same processes — x-pencils (every
// rank holds whole lines along x, the y-z plane split over a pa x pb grid) and y-pencils (whole
// lines along y) — and one redistribute_plan between them, executed forward (x -> y pencils)
// and inverse (y -> x pencils). In between, each rank works along y on lines it now holds
// entirely (a running sum along y stands in for a 1-D FFT). Every element is checked after
// each transpose; the program prints the bytes moved and the time per transpose, and exits
// with status 1 if any element is wrong.
//
// Run: mpiexec -n 4 build/mpich/examples/gallery/halox-pencil-transpose
#include <halox/halox.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

using halox::index_t;
index_t const nx = 32, ny = 24, nz = 20;

// The starting field: each element holds its global row-major index (exact in double).
double value(index_t i, index_t j, index_t k) { return static_cast<double>((i * ny + j) * nz + k); }

// The field after the running sum along y: sum over j' <= j of value(i, j', k).
double summed(index_t i, index_t j, index_t k) {
  return static_cast<double>((j + 1) * (i * ny * nz + k) + nz * j * (j + 1) / 2);
}

// Number of owned elements of `u` (laid out as `t`) that differ from f(i, j, k).
template <class F>
long long count_wrong(halox::tensor_desc const& t, std::vector<double> const& u, F f) {
  halox::box const b = t.owned_box();
  long long wrong = 0;
  for (index_t i = b.lo[0]; i < b.hi[0]; ++i)
    for (index_t j = b.lo[1]; j < b.hi[1]; ++j)
      for (index_t k = b.lo[2]; k < b.hi[2]; ++k)
        wrong += u[t.local_offset({i, j, k})] != f(i, j, k);
  return wrong;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int p[2] = {0, 0};
    MPI_Dims_create(size, 2, p); // the pa x pb grid of the plane across the pencils

    // Two grids over the same processes; each leaves whole the dimension its pencils run along.
    // No halos: a transpose moves owned cells only.
    halox::process_grid xgrid(MPI_COMM_WORLD, {1, p[0], p[1]});
    halox::process_grid ygrid(MPI_COMM_WORLD, {p[0], 1, p[1]});
    halox::tensor_desc xpen(xgrid, {nx, ny, nz}, halox::dtype::float64);
    halox::tensor_desc ypen(ygrid, {nx, ny, nz}, halox::dtype::float64);

    halox::redistribute_options ro;
    // A fixed backend keeps plan construction short; `automatic` would time the candidates
    // (packing, derived datatypes, all-to-all collectives, ...) and keep the fastest.
    ro.method = halox::backend::mpi_pack;
    halox::redistribute_plan transpose(xpen, ypen, ro); // built once, executed many times

    std::vector<double> x(xpen.local_elements()), y(ypen.local_elements());
    halox::box const xb = xpen.owned_box();
    for (index_t i = xb.lo[0]; i < xb.hi[0]; ++i)
      for (index_t j = xb.lo[1]; j < xb.hi[1]; ++j)
        for (index_t k = xb.lo[2]; k < xb.hi[2]; ++k)
          x[xpen.local_offset({i, j, k})] = value(i, j, k);

    // x-pencils -> y-pencils: every rank now holds whole lines along y.
    transpose.execute(halox::tensor_view(xpen, x), halox::tensor_view(ypen, y));
    long long wrong = count_wrong(ypen, y, value);

    // Work along y, locally: a running sum over each line (an FFT would transform it).
    halox::box const yb = ypen.owned_box();
    for (index_t i = yb.lo[0]; i < yb.hi[0]; ++i)
      for (index_t k = yb.lo[2]; k < yb.hi[2]; ++k)
        for (index_t j = 1; j < ny; ++j)
          y[ypen.local_offset({i, j, k})] += y[ypen.local_offset({i, j - 1, k})];

    // y-pencils -> x-pencils: the same plan, inverse direction.
    std::fill(x.begin(), x.end(), -1.0);
    transpose.execute_inverse(halox::tensor_view(ypen, y), halox::tensor_view(xpen, x));
    wrong += count_wrong(xpen, x, summed);

    // Timing: forward and inverse transposes back and forth on the same buffers.
    int const reps = 20;
    MPI_Barrier(MPI_COMM_WORLD);
    double const t0 = MPI_Wtime();
    for (int r = 0; r < reps; ++r) {
      transpose.execute(halox::tensor_view(xpen, x), halox::tensor_view(ypen, y));
      transpose.execute_inverse(halox::tensor_view(ypen, y), halox::tensor_view(xpen, x));
    }
    double const seconds = (MPI_Wtime() - t0) / (2 * reps);
    wrong += count_wrong(xpen, x, summed) + count_wrong(ypen, y, summed);

    long long total_wrong = 0;
    double slowest = 0;
    unsigned long long sent = transpose.bytes_sent(), total_sent = 0, max_sent = 0;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&sent, &total_sent, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&sent, &max_sent, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("pencil_transpose: %lldx%lldx%lld float64, x-pencils (grid 1x%dx%d) <-> "
                  "y-pencils (grid %dx1x%d)\n",
                  static_cast<long long>(nx), static_cast<long long>(ny),
                  static_cast<long long>(nz), p[0], p[1], p[0], p[1]);
      std::printf("  bytes moved per transpose: %llu in all, at most %llu per rank (of %zu "
                  "held); rank 0 exchanges with %d rank%s\n",
                  total_sent, max_sent, xpen.local_bytes(), transpose.num_peers(),
                  transpose.num_peers() == 1 ? "" : "s");
      std::printf("  time per transpose: %.3f ms (slowest rank, mean of %d)\n", 1e3 * slowest,
                  2 * reps);
      std::printf("  %lld wrong elements %s\n", total_wrong, total_wrong ? "FAILED" : "(ok)");
    }
    rc = total_wrong ? 1 : 0;
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
