// heat3d: the 3-D heat equation (a Jacobi sweep of the 7-point stencil) on a 3-D process grid.
//
// Shows: describing a haloed tensor, a halo_plan refreshing the halos before every step, with
// periodic boundaries and with fixed (Dirichlet) boundaries that the plan fills itself; then a
// deep halo (deep_halo_schedule): halos 4 cells wide, exchanged once every 4 steps, each step
// computing a region that shrinks by one cell. Every rank also runs the same stencil serially on
// the whole domain and compares its own block with it, so the program fails (exit status 1) if
// any cell differs.
//
// Run: mpiexec -n 4 build/mpich/examples/gallery/halox-heat3d
#include <halox/halox.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace {

using halox::index_t;
std::vector<index_t> const shape{24, 20, 18}; // global cells; uneven blocks on most grids
constexpr int steps = 24;
constexpr double alpha = 0.125; // diffusion number: stable for alpha <= 1/6
constexpr double wall = 1.0;    // the Dirichlet value beyond the domain

double initial(index_t i, index_t j, index_t k) {
  return std::sin(0.4 * i) * std::cos(0.3 * j) + 0.01 * k;
}

// One Jacobi step on the cells of box `r` (local coordinates of a buffer with strides `s`). The
// serial and the distributed runs share it, so they compute every cell with the same arithmetic.
void sweep(std::vector<double> const& cur, std::vector<double>& next, halox::box const& r,
           std::vector<index_t> const& s) {
  for (index_t i = r.lo[0]; i < r.hi[0]; ++i)
    for (index_t j = r.lo[1]; j < r.hi[1]; ++j)
      for (index_t k = r.lo[2]; k < r.hi[2]; ++k) {
        index_t const c = i * s[0] + j * s[1] + k * s[2];
        double const lap = cur[c - s[0]] + cur[c + s[0]] + cur[c - s[1]] + cur[c + s[1]] +
                           cur[c - s[2]] + cur[c + s[2]] - 6 * cur[c];
        next[c] = cur[c] + alpha * lap;
      }
}

// The reference: the whole domain on one process, in a buffer with a one-cell frame that holds
// the periodic copies (or the wall value), refreshed by hand before every step.
struct serial_run {
  std::vector<index_t> s{(shape[1] + 2) * (shape[2] + 2), shape[2] + 2, 1};
  std::vector<double> u;
  index_t at(index_t i, index_t j, index_t k) const {
    return (i + 1) * s[0] + (j + 1) * s[1] + (k + 1);
  }
  explicit serial_run(bool periodic) : u((shape[0] + 2) * s[0]) {
    auto wrap = [](index_t x, index_t n) { return (x + n) % n; };
    for (index_t i = 0; i < shape[0]; ++i)
      for (index_t j = 0; j < shape[1]; ++j)
        for (index_t k = 0; k < shape[2]; ++k) u[at(i, j, k)] = initial(i, j, k);
    std::vector<double> next(u.size());
    halox::box const inner{3, {1, 1, 1}, {shape[0] + 1, shape[1] + 1, shape[2] + 1}};
    for (int step = 0; step < steps; ++step) {
      for (index_t i = -1; i <= shape[0]; ++i) // the frame: every cell outside [0, shape)
        for (index_t j = -1; j <= shape[1]; ++j)
          for (index_t k = -1; k <= shape[2]; ++k) {
            bool const out =
                i < 0 || j < 0 || k < 0 || i == shape[0] || j == shape[1] || k == shape[2];
            if (out)
              u[at(i, j, k)] =
                  periodic ? u[at(wrap(i, shape[0]), wrap(j, shape[1]), wrap(k, shape[2]))] : wall;
          }
      sweep(u, next, inner, s);
      std::swap(u, next);
    }
  }
};

// Largest difference between this rank's owned block of `u` (laid out as `t`) and the reference.
double max_error(halox::tensor_desc const& t, std::vector<double> const& u, serial_run const& ref) {
  halox::box const b = t.owned_box();
  double err = 0;
  for (index_t i = b.lo[0]; i < b.hi[0]; ++i)
    for (index_t j = b.lo[1]; j < b.hi[1]; ++j)
      for (index_t k = b.lo[2]; k < b.hi[2]; ++k)
        err = std::max(err, std::abs(u[t.local_offset({i, j, k})] - ref.u[ref.at(i, j, k)]));
  return err;
}

// The owned block in the local coordinates of the buffer (where the halo_plan runs leave it).
halox::box owned_local(halox::tensor_desc const& t) {
  halox::box r{3, {}, {}};
  for (int d = 0; d < 3; ++d) {
    r.lo[d] = t.owned_offset_at(d);
    r.hi[d] = r.lo[d] + t.owned_box().extent(d);
  }
  return r;
}

// Sets the owned cells of `u` to the initial field.
void fill_initial(halox::tensor_desc const& t, std::vector<double>& u) {
  halox::box const b = t.owned_box();
  for (index_t i = b.lo[0]; i < b.hi[0]; ++i)
    for (index_t j = b.lo[1]; j < b.hi[1]; ++j)
      for (index_t k = b.lo[2]; k < b.hi[2]; ++k) u[t.local_offset({i, j, k})] = initial(i, j, k);
}

// Prints one result line on rank 0 (errors and times are maxima over the ranks); true if exact.
bool report(MPI_Comm comm, char const* what, double err, double seconds, int peers, int exchanges) {
  double e = 0, t = 0;
  int p = 0;
  MPI_Allreduce(&err, &e, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(&seconds, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(&peers, &p, 1, MPI_INT, MPI_MAX, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  bool const ok = e <= 1e-12;
  if (rank == 0)
    std::printf("  %-42s max error %.1e, %7.3f ms/step, %2d exchanges, %d peer%s%s\n", what, e,
                1e3 * t / steps, exchanges, p, p == 1 ? "" : "s", ok ? "" : "  FAILED");
  return ok;
}

// Every step: refresh the width-1 halos, then sweep the owned block.
bool run_every_step(halox::process_grid const& grid, bool periodic) {
  std::vector<halox::dim_options> dims(3, halox::dim_options::halo(1, periodic));
  halox::tensor_desc t(grid, shape, halox::dtype::float64, dims);
  halox::halo_options ho;
  // A fixed backend keeps plan construction short; `automatic` would time the candidates first.
  ho.method = halox::backend::mpi_pack;
  if (!periodic) { // the plan writes the wall value into halo cells beyond the domain
    ho.boundary = halox::boundary_fill::constant;
    ho.fill_value = wall;
  }
  halox::halo_plan plan(t, ho);
  std::vector<double> a(t.local_elements()), b(t.local_elements());
  fill_initial(t, a);
  std::vector<double>*cur = &a, *nxt = &b;
  MPI_Barrier(grid.comm());
  double const t0 = MPI_Wtime();
  for (int step = 0; step < steps; ++step) {
    plan.execute(halox::tensor_view(t, *cur)); // halos (and walls) of the current field
    sweep(*cur, *nxt, owned_local(t), t.strides());
    std::swap(cur, nxt);
  }
  double const seconds = MPI_Wtime() - t0;
  return report(grid.comm(),
                periodic ? "periodic,  halo 1, exchange every step"
                         : "Dirichlet, halo 1, exchange every step",
                max_error(t, *cur, serial_run(periodic)), seconds, plan.num_peers(), steps);
}

// Deep halo: halos `depth` wide, one exchange per `depth` steps (Dirichlet boundaries).
bool run_deep(halox::process_grid const& grid, int depth) {
  halox::halo_options ho;
  ho.method = halox::backend::mpi_pack;
  ho.boundary = halox::boundary_fill::constant;
  ho.fill_value = wall;
  halox::deep_halo_schedule s(grid, shape, halox::dtype::float64, {1, 1, 1}, depth, {}, ho);
  auto const& t = s.desc();
  // The plan fills the walls only in the buffer it exchanges, and steps alternate between two
  // buffers: give both the wall value everywhere first (steps never write beyond the domain).
  std::vector<double> a(t.local_elements(), wall), b(t.local_elements(), wall);
  fill_initial(t, a);
  std::vector<double>*cur = &a, *nxt = &b;
  MPI_Barrier(grid.comm());
  double const t0 = MPI_Wtime();
  for (int done = 0; done < steps; done += s.exchange_every()) {
    s.plan().execute(halox::tensor_view(t, *cur));
    int const m = std::min(s.exchange_every(), steps - done);       // a short last cycle...
    for (int step = s.depth() - m + 1; step <= s.depth(); ++step) { // ...runs the last steps
      sweep(*cur, *nxt, s.valid_region(step), t.strides());         // shrinks by 1 cell per step
      std::swap(cur, nxt);
    }
  }
  double const seconds = MPI_Wtime() - t0;
  int const exchanges = (steps + depth - 1) / depth;
  char what[64];
  std::snprintf(what, sizeof what, "Dirichlet, halo %d, exchange every %d steps", depth, depth);
  bool const ok = report(grid.comm(), what, max_error(t, *cur, serial_run(false)), seconds,
                         s.messages(), exchanges);
  if (grid.rank() == 0)
    std::printf("    (deep halo: %.0f%% of the cells rank 0 computes are computed by a neighbour "
                "too)\n",
                100 * s.redundant_fraction());
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    // halox picks the 3-D grid that moves the fewest halo cells for this shape.
    auto grid = halox::process_grid::create(MPI_COMM_WORLD, {0, 0, 0}, shape, {1, 1, 1}, {1, 1, 1});
    if (grid.rank() == 0)
      std::printf("heat3d: %lldx%lldx%lld cells on a %dx%dx%d process grid, %d steps\n",
                  static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
                  static_cast<long long>(shape[2]), grid.dims()[0], grid.dims()[1], grid.dims()[2],
                  steps);
    bool ok = run_every_step(grid, true);
    ok = run_every_step(grid, false) && ok;
    ok = run_deep(grid, 4) && ok;
    rc = ok ? 0 : 1;
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
