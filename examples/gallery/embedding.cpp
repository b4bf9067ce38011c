// embedding: halox inside a framework that owns the memory and the schedule.
//
// Shows: a context whose allocator is the framework's (every byte its plans hold comes from
// there, at construction only); a plan built with an external workspace, handed caller memory
// with set_workspace before each exchange (a new allocation every step, as a caching allocator
// would give); and start/wait of a halo exchange overlapped with the caller's own compute: a
// 5-point Laplacian of the cells that need no halo while the messages travel, then the
// boundary ring after wait. The overlapped result must equal, bit for bit, the one computed
// after a blocking exchange, which must equal the Laplacian of the global field; the program
// exits with status 1 otherwise, or if a plan allocates while executing.
//
// Run: mpiexec -n 4 build/mpich/examples/gallery/halox-embedding
#include <halox/halox.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using halox::index_t;
std::vector<index_t> const shape{40, 36}; // periodic in both dimensions

double field(index_t i, index_t j) { return std::sin(0.3 * i) + std::cos(0.2 * i * j); }

// Stand-in for a framework's caching allocator: 64-byte aligned blocks, counted.
struct pool {
  std::size_t live = 0; // bytes handed out and not yet returned
  long calls = 0;       // allocations so far
  void* get(std::size_t n) {
    ++calls;
    live += n;
    return std::aligned_alloc(64, (n + 63) / 64 * 64);
  }
  void put(void* p, std::size_t n) {
    live -= n;
    std::free(p);
  }
};

// out = Laplacian of u on the cells of box `r` (global coordinates), both laid out as `t`.
void laplacian(halox::tensor_desc const& t, std::vector<double> const& u, std::vector<double>& out,
               halox::box const& r) {
  index_t const s = t.strides()[0];
  for (index_t i = r.lo[0]; i < r.hi[0]; ++i)
    for (index_t j = r.lo[1]; j < r.hi[1]; ++j) {
      index_t const c = t.local_offset({i, j});
      out[c] = u[c - s] + u[c + s] + u[c - 1] + u[c + 1] - 4 * u[c];
    }
}

// The owned block without its outer layer of cells: what needs no halo cell (clamped when the
// block is thinner than 3 cells).
halox::box interior(halox::box b) {
  for (int d = 0; d < 2; ++d) {
    b.lo[d] = std::min(b.lo[d] + 1, b.hi[d]);
    b.hi[d] = std::max(b.hi[d] - 1, b.lo[d]);
  }
  return b;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    pool mem;
    {
      // Every plan built on this context draws its memory from `mem`.
      halox::context_options co;
      co.alloc.allocate = [&](std::size_t n, halox::memory_kind) { return mem.get(n); };
      co.alloc.deallocate = [&](void* p, std::size_t n, halox::memory_kind) { mem.put(p, n); };
      halox::context ctx(MPI_COMM_WORLD, co);

      auto grid =
          halox::process_grid::create(MPI_COMM_WORLD, {0, 0}, shape, {1, 1}, {1, 1}, {true, true});
      halox::tensor_desc t(grid, shape, halox::dtype::float64,
                           {halox::dim_options::halo(1, true), halox::dim_options::halo(1, true)});

      halox::halo_options ho;
      ho.method = halox::backend::mpi_pack;  // a fixed backend: no timing of candidates
      halox::halo_plan blocking(ctx, t, ho); // its workspace comes from ctx's allocator
      ho.external_workspace = true;          // this one's workspace comes from the caller
      halox::halo_plan overlapped(ctx, t, ho);
      halox::workspace_size const need = overlapped.workspace_bytes();
      std::size_t const ws_bytes = std::max<std::size_t>(need.host, 64); // never a 0-byte block

      std::vector<double> u(t.local_elements()), ref(t.local_elements()), out(t.local_elements());
      halox::box const own = t.owned_box();
      for (index_t i = own.lo[0]; i < own.hi[0]; ++i)
        for (index_t j = own.lo[1]; j < own.hi[1]; ++j) u[t.local_offset({i, j})] = field(i, j);
      std::vector<double> u2 = u;

      // Reference: blocking exchange, then the whole owned block.
      blocking.execute(halox::tensor_view(t, u));
      laplacian(t, u, ref, own);

      // Overlapped, three steps on the same field, each with a fresh workspace from the
      // framework's allocator (as a caching allocator hands out whatever block is free).
      long const calls_before = mem.calls;
      halox::box const in = interior(own);
      for (int step = 0; step < 3; ++step) {
        void* ws = mem.get(ws_bytes);
        overlapped.set_workspace({ws, ws_bytes}); // before the exchange that uses it
        overlapped.start(halox::tensor_view(t, u2));
        // Messages are in flight: owned cells may be read (not written), halos not touched.
        laplacian(t, u2, out, in);
        overlapped.wait();
        // The boundary ring: the rows above and below the interior, then the columns beside it.
        halox::box ring[4] = {own, own, in, in};
        ring[0].hi[0] = in.lo[0];
        ring[1].lo[0] = in.hi[0];
        ring[2].lo[1] = own.lo[1], ring[2].hi[1] = in.lo[1];
        ring[3].lo[1] = in.hi[1], ring[3].hi[1] = own.hi[1];
        for (auto const& r : ring) laplacian(t, u2, out, r);
        mem.put(ws, ws_bytes); // the exchange has ended: the workspace is free again
      }

      // Checks: overlapped == blocking bit for bit; blocking == the Laplacian of the global
      // periodic field; the plans allocated nothing while executing (only our 3 workspaces);
      // what the allocator holds is what the context says its plans hold.
      long bad = 0;
      double err = 0;
      auto wrap = [](index_t x, index_t n) { return (x + n) % n; };
      for (index_t i = own.lo[0]; i < own.hi[0]; ++i)
        for (index_t j = own.lo[1]; j < own.hi[1]; ++j) {
          index_t const c = t.local_offset({i, j});
          bad += out[c] != ref[c];
          double const exact = field(wrap(i - 1, shape[0]), j) + field(wrap(i + 1, shape[0]), j) +
                               field(i, wrap(j - 1, shape[1])) + field(i, wrap(j + 1, shape[1])) -
                               4 * field(i, j);
          err = std::max(err, std::abs(ref[c] - exact));
        }
      long const extra = mem.calls - calls_before - 3;
      std::size_t const held = ctx.bytes_in_use(halox::memory_kind::host) +
                               ctx.bytes_in_use(halox::memory_kind::pinned_host);
      long counts[3] = {bad, extra, mem.live != held}, sums[3] = {};
      double max_err = 0;
      MPI_Allreduce(counts, sums, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(&err, &max_err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      bool const all_ok = sums[0] == 0 && sums[1] == 0 && sums[2] == 0 && max_err <= 1e-12;
      if (grid.rank() == 0)
        std::printf("embedding: %lldx%lld, periodic, on a %dx%d grid\n"
                    "  rank 0: the allocator holds %zu B for the context's plans (context: %zu "
                    "B); workspace from the caller: %zu B per step\n"
                    "  overlapped vs blocking: %ld cells differ; blocking vs exact: max error "
                    "%.1e; allocations while executing: %ld; allocator/context mismatches: "
                    "%ld  %s\n",
                    static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
                    grid.dims()[0], grid.dims()[1], mem.live, held, need.host, sums[0], max_err,
                    sums[1], sums[2], all_ok ? "(ok)" : "FAILED");
      rc = all_ok ? 0 : 1;
    } // the plans and the context are gone: everything went back to the pool
    if (mem.live != 0) {
      std::fprintf(stderr, "embedding: %zu bytes not returned to the allocator\n", mem.live);
      rc = 1;
    }
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
