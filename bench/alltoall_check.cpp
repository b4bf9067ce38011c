// halox-alltoall-check: a plain MPI program (no halox, no Google Benchmark) that times
// MPI_Alltoall of a given number of bytes per rank exactly as halox-bench times its
// limit_alltoall entries (a barrier, the call, the maximum over ranks; warm-up calls first;
// median over iterations). halox-bench's redistribution ratios are stated against that limit, so
// it must read what a standalone all-to-all reads: run both on the same ranks and binding and
// compare (docs/bench.md).
//
// Usage: mpiexec -n P halox-alltoall-check [--bytes N] [--iterations K] [--warmup W]
//   --bytes       bytes each rank sends in all, its self block included (default: a 4096^2
//                 double matrix split over the ranks, halox-bench's transpose scenario)
//   --iterations  timed calls (default 20), --warmup untimed calls first (default 3)
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Parses a positive integer no larger than `max`; exits with code 2 naming the flag otherwise.
long long parse(char const* flag, char const* text, long long max, int rank) {
  errno = 0;
  char* end = nullptr;
  long long const v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 || v > max) {
    if (rank == 0)
      std::fprintf(stderr,
                   "halox-alltoall-check: %s='%s' is invalid; give an integer from 1 to %lld\n",
                   flag, text, max);
    MPI_Finalize();
    std::exit(2);
  }
  return v;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int p = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long long bytes = 4096LL * 4096 * 8 / p;
  long long iterations = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 >= argc || (a != "--bytes" && a != "--iterations" && a != "--warmup")) {
      if (rank == 0)
        std::fprintf(stderr,
                     "halox-alltoall-check: unknown or incomplete argument '%s'; usage: "
                     "halox-alltoall-check [--bytes N] [--iterations K] [--warmup W]\n",
                     argv[i]);
      MPI_Finalize();
      return 2;
    }
    char const* v = argv[++i];
    if (a == "--bytes")
      bytes = parse("--bytes", v, static_cast<long long>(INT_MAX) * p, rank);
    else if (a == "--iterations")
      iterations = parse("--iterations", v, 100000, rank);
    else
      warmup = parse("--warmup", v, 100000, rank);
  }
  int const per_peer = static_cast<int>(bytes / p);
  std::size_t const total = static_cast<std::size_t>(per_peer) * static_cast<std::size_t>(p);
  std::vector<char> send(std::max<std::size_t>(total, 1), 0x5a), recv(send.size(), 0x22);
  for (long long i = 0; i < warmup; ++i)
    MPI_Alltoall(send.data(), per_peer, MPI_BYTE, recv.data(), per_peer, MPI_BYTE, MPI_COMM_WORLD);
  std::vector<double> t;
  for (long long i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double const t0 = MPI_Wtime();
    MPI_Alltoall(send.data(), per_peer, MPI_BYTE, recv.data(), per_peer, MPI_BYTE, MPI_COMM_WORLD);
    double const dt = MPI_Wtime() - t0;
    double mx = 0;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(mx);
  }
  // Every byte of the own block must have arrived: the check cannot time a no-op.
  bool ok = std::count(recv.begin(), recv.end(), 0x5a) == static_cast<long>(total);
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  std::sort(t.begin(), t.end());
  if (rank == 0) {
    std::printf("MPI_Alltoall %zu B per rank (%d B per peer) on %d ranks: median %.1f us, "
                "min %.1f us, p90 %.1f us\n",
                total, per_peer, p, t[t.size() / 2] * 1e6, t.front() * 1e6,
                t[std::min(t.size() - 1, t.size() * 9 / 10)] * 1e6);
    if (!all) std::fprintf(stderr, "halox-alltoall-check: received data is wrong\n");
  }
  MPI_Finalize();
  return all ? 0 : 1;
}
