// halox-bench-first: how fast is a new plan? For each host backend, builds a few halo plans one
// after another on one context and times the construction and each of the first exchanges of
// each plan. A transport that wires its connections lazily shows it here: a first exchange many
// times slower than the tenth. halox warms every plan's transport at construction, so the first
// column should read like the last.
//
//   mpiexec -n 2 halox-bench-first [--face-bytes B] [--plans P] [--exchanges E] [--backends a,b]
//
// The tensor is 2-D float, split over the ranks along dimension 0, periodic, halo 1: each rank
// exchanges one contiguous face of B bytes with each of its two neighbours (the one rank with
// one process exchanges with itself). Each exchange is timed between barriers, max over ranks.
// Prints one line per plan: backend, plan number, construction ms, then the first exchanges in
// microseconds and the median of the rest.
#include <halox/halox.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct args {
  long face_bytes = 512;
  int plans = 3;
  int exchanges = 30;
  std::vector<std::string> backends;
};

[[noreturn]] void usage(int rank, std::string const& why) {
  if (rank == 0)
    std::fprintf(stderr,
                 "halox-bench-first: %s\nusage: halox-bench-first [--face-bytes B (>= 4)] "
                 "[--plans P (>= 1)] [--exchanges E (>= 2)] [--backends name,name,...]\n",
                 why.c_str());
  MPI_Finalize();
  std::exit(2);
}

long number(int rank, char const* flag, char const* text, long lo) {
  char* end = nullptr;
  long const v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo)
    usage(rank, std::string(flag) + " " + text + " is not a whole number >= " + std::to_string(lo));
  return v;
}

args parse(int argc, char** argv, int rank) {
  args a;
  for (int i = 1; i < argc; ++i) {
    std::string const f = argv[i];
    if (i + 1 >= argc) usage(rank, f + " needs a value");
    char const* v = argv[++i];
    if (f == "--face-bytes") {
      a.face_bytes = number(rank, "--face-bytes", v, 4);
    } else if (f == "--plans") {
      a.plans = static_cast<int>(number(rank, "--plans", v, 1));
    } else if (f == "--exchanges") {
      a.exchanges = static_cast<int>(number(rank, "--exchanges", v, 2));
    } else if (f == "--backends") {
      std::stringstream list(v);
      for (std::string name; std::getline(list, name, ',');) {
        try {
          (void)halox::backend_from_string(name);
        } catch (halox::error const& e) {
          usage(rank, "--backends: " + e.message());
        }
        a.backends.push_back(name);
      }
    } else {
      usage(rank, "unknown option " + f);
    }
  }
  if (a.backends.empty())
    for (auto b : halox::host_backends()) a.backends.emplace_back(halox::to_string(b));
  return a;
}

double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  args const a = parse(argc, argv, rank);
  long const cols = std::max(1L, a.face_bytes / 4);
  int rc = 0;
  {
    halox::process_grid grid(MPI_COMM_WORLD, {size, 1});
    halox::context ctx(grid.comm());
    if (rank == 0)
      std::printf("# halox-bench-first: %d rank(s), face %ld B, %s\n# backend plan build_ms "
                  "first exchanges (us) ... | median of the rest (us)\n",
                  size, cols * 4, halox::mpi_library_version().c_str());
    for (auto const& name : a.backends) {
      for (int p = 0; p < a.plans; ++p) {
        halox::tensor_desc x(grid, {4L * size, cols}, halox::dtype::float32,
                             {halox::dim_options::halo(1, true), halox::dim_options{}});
        std::vector<float> buf(x.local_elements(), 1.0f);
        halox::halo_options o;
        o.method = halox::backend_from_string(name);
        MPI_Barrier(MPI_COMM_WORLD);
        double const t0 = MPI_Wtime();
        std::string problem;
        std::unique_ptr<halox::halo_plan> plan;
        try {
          plan = std::make_unique<halox::halo_plan>(ctx, x, o);
        } catch (halox::error const& e) {
          problem = e.message();
        }
        double const built = max_over_ranks(MPI_Wtime() - t0);
        if (!plan) { // the same on every rank: construction is collective
          if (rank == 0) std::printf("%s: not available: %s\n", name.c_str(), problem.c_str());
          break;
        }
        std::vector<double> t;
        for (int i = 0; i < a.exchanges; ++i) {
          MPI_Barrier(MPI_COMM_WORLD);
          double const s = MPI_Wtime();
          plan->execute(halox::tensor_view(x, buf));
          t.push_back(max_over_ranks(MPI_Wtime() - s));
        }
        if (buf.front() != 1.0f || buf.back() != 1.0f) rc = 1; // every cell holds 1
        if (rank == 0) {
          int const shown = std::min(a.exchanges, 8);
          std::printf("%-20s %d %8.2f ", name.c_str(), p, built * 1e3);
          for (int i = 0; i < shown; ++i) std::printf(" %7.1f", t[i] * 1e6);
          std::vector<double> rest(t.begin() + (a.exchanges > shown ? shown : shown / 2), t.end());
          std::nth_element(rest.begin(), rest.begin() + rest.size() / 2, rest.end());
          std::printf(" | %7.1f\n", rest[rest.size() / 2] * 1e6);
        }
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0 && rank == 0) std::fprintf(stderr, "halox-bench-first: wrong halo values\n");
  MPI_Finalize();
  return rc;
}
