// halox-bench-tiling: deep halos (overlapped tiling) on a 3-D 7-point Jacobi stencil.
//
// For each emulated latency and each depth k, runs `steps` Jacobi steps (double) with one halo
// exchange every k steps (`halox::deep_halo_schedule`), `warmup` untimed runs then `reps` timed
// runs from the same initial field; the depths take turns run by run. Per run, each rank's exchange
// time, compute time and total are reduced with MPI_Allreduce(MAX) (the slowest rank sets the
// pace); the run with the median total is reported, per step. After every run the owned cells are
// compared with the depth-1 result of the first latency bit for bit; any difference fails the run
// (exit status 1).
//
// Emulated network latency (--latency-us L): before each exchange a rank busy-waits L
// microseconds for every message it sends in that exchange. Its peers cannot receive before the
// sender posts, so they wait too, as they would for a message in flight on a network whose
// per-message cost (software overhead, injection gap and wire latency: LogP's o + g + L) is L.
// Charging it per message and serially is the pessimistic end of that model (real networks
// overlap some of it); at 2 ranks on one split dimension each rank sends one message per
// exchange, so per-message and per-round charging coincide. A busy wait, not a sleep: MPI
// libraries poll while they wait, so the core is held, as here.
#include <halox/halox.hpp>

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace {

using halox::box;
using halox::index_t;

struct args {
  std::vector<index_t> shape{64, 64, 64};
  std::vector<int> depths{1, 2, 4};
  std::vector<double> latencies{0, 20, 100};
  std::vector<bool> periodic{false, false, false};
  int steps = 48, reps = 5, warmup = 1;
  std::string backend = "mpi_pack";
  bool fastest = false; // --stat min: report the fastest run instead of the median one
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

void usage() {
  std::printf(
      "halox-bench-tiling [--shape NXxNYxNZ] [--steps N] [--depths K,K,...]\n"
      "                   [--latency-us L,L,...] [--reps N] [--warmup N] [--periodic P,P,P]\n"
      "                   [--backend NAME] [--stat median|min]\n"
      "3-D 7-point Jacobi (double) with one halo exchange every K steps (deep halos). Defaults:\n"
      "--shape 64x64x64 --steps 48 --depths 1,2,4 --latency-us 0,20,100 --reps 5 --warmup 1\n"
      "--periodic 0,0,0 --backend mpi_pack --stat median. --latency-us L busy-waits L\n"
      "microseconds per message a rank sends, before each exchange (an emulated network\n"
      "latency). Prints a markdown table per step: messages, bytes, exchange, compute, total and\n"
      "CPU time (max over ranks, of the run with the median total, or the fastest with --stat\n"
      "min: on a machine shared with other jobs the least disturbed run), the redundant share of\n"
      "computed cells, and the speed-up over depth 1.\n");
}

// Splits "a,b,c" (or "AxBxC" with sep 'x'); every item must parse with `one`.
template <class T, class F> std::string parse_list(char const* name, std::string const& text,
                                                   char sep, F one, std::vector<T>& out) {
  out.clear();
  std::size_t at = 0;
  while (true) {
    std::size_t const end = std::min(text.find(sep, at), text.size());
    T v{};
    std::string const item = text.substr(at, end - at);
    std::string const err = one(item, v);
    if (!err.empty())
      return std::string(name) + " '" + text + "' is invalid: item '" + item + "' " + err;
    out.push_back(v);
    if (end == text.size()) break;
    at = end + 1;
  }
  return {};
}

// `text` as a whole number in [lo, hi], or what is wrong with it.
template <class T> std::string whole(std::string const& text, long long lo, long long hi, T& out) {
  char* end = nullptr;
  errno = 0;
  long long const v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || v < lo || v > hi)
    return "is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  out = static_cast<T>(v);
  return {};
}

std::string parse_args(int argc, char** argv, args& a, bool& help) {
  for (int i = 1; i < argc; ++i) {
    std::string const k = argv[i];
    if (k == "--help" || k == "-h") {
      help = true;
      return {};
    }
    if (i + 1 >= argc) return "option '" + k + "' needs a value (or is unknown); see --help";
    std::string const v = argv[++i];
    std::string err;
    if (k == "--shape") {
      err = parse_list<index_t>(
          "--shape", v, 'x',
          [](std::string const& s, index_t& o) { return whole(s, 1, 1 << 20, o); }, a.shape);
      if (err.empty() && a.shape.size() != 3)
        err = "--shape '" + v + "' is invalid: give three extents, e.g. 64x64x64";
    } else if (k == "--depths") {
      err = parse_list<int>(
          "--depths", v, ',', [](std::string const& s, int& o) { return whole(s, 1, 1024, o); },
          a.depths);
    } else if (k == "--latency-us") {
      err = parse_list<double>(
          "--latency-us", v, ',',
          [](std::string const& s, double& o) -> std::string {
            char* end = nullptr;
            o = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(o) || o < 0 || o > 1e6)
              return "is not a number from 0 to 1e6 (microseconds)";
            return {};
          },
          a.latencies);
    } else if (k == "--periodic") {
      err = parse_list<bool>(
          "--periodic", v, ',',
          [](std::string const& s, bool& o) -> std::string {
            if (s != "0" && s != "1") return "is not 0 or 1";
            o = s == "1";
            return {};
          },
          a.periodic);
      if (err.empty() && a.periodic.size() != 3)
        err = "--periodic '" + v + "' is invalid: give three flags (0 or 1), e.g. 0,0,1";
    } else if (k == "--steps") {
      err = whole(v, 1, 1000000, a.steps);
      if (!err.empty()) err = "--steps '" + v + "' " + err;
    } else if (k == "--reps") {
      err = whole(v, 1, 100000, a.reps);
      if (!err.empty()) err = "--reps '" + v + "' " + err;
    } else if (k == "--warmup") {
      err = whole(v, 0, 100000, a.warmup);
      if (!err.empty()) err = "--warmup '" + v + "' " + err;
    } else if (k == "--stat") {
      if (v != "median" && v != "min") err = "--stat '" + v + "' is invalid: use median or min";
      a.fastest = v == "min";
    } else if (k == "--backend") {
      a.backend = v;
    } else {
      return "unknown option '" + k + "'; see --help";
    }
    if (!err.empty()) return err;
  }
  return {};
}

// Holds the core for `us` microseconds (see the latency model above).
void busy_wait(double us) {
  if (us <= 0) return;
  double const until = MPI_Wtime() + us * 1e-6;
  while (MPI_Wtime() < until) {
  }
}

// One 7-point Jacobi step on region `r` (local coordinates) from `u` into `v`.
void jacobi(double const* u, double* v, box const& r, std::vector<index_t> const& st) {
  index_t const s0 = st[0], s1 = st[1];
  for (index_t i = r.lo[0]; i < r.hi[0]; ++i)
    for (index_t j = r.lo[1]; j < r.hi[1]; ++j) {
      index_t const row = i * s0 + j * s1;
      double const* c = u + row;
      double* o = v + row;
      for (index_t k = r.lo[2]; k < r.hi[2]; ++k)
        o[k] = 0.5 * c[k] +
               (1.0 / 12) *
                   (((((c[k - s0] + c[k + s0]) + c[k - s1]) + c[k + s1]) + c[k - 1]) + c[k + 1]);
    }
}

struct timing {
  double exchange = 0, compute = 0, total = 0, cpu = 0;
};

// CPU time of this process: on a machine shared with other jobs, where the wall times stretch
// with the share of the cores a rank gets, it shows the work (MPI busy-polls while it waits, so
// waiting for a message counts too, as it holds the core).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The run with the median total (or the fastest); its exchange and compute times are reported
// with it, so that a row's parts come from one run (medians taken per column need not add up).
// Interference from other jobs only adds time, so on a shared machine the fastest run is the
// least disturbed one.
timing pick_run(std::vector<timing> v, bool fastest) {
  std::sort(v.begin(), v.end(), [](timing const& x, timing const& y) { return x.total < y.total; });
  return fastest ? v.front() : v[v.size() / 2];
}

// Fills a buffer: owned cells from the initial field, halo cells NaN (the exchange must write
// every one that is read), cells beyond a non-periodic boundary the boundary value 0.
void initialise(halox::tensor_desc const& d, std::vector<bool> const& periodic,
                std::vector<double>& a, std::vector<double>& b) {
  box const al = d.dist().allocated_box(d.grid().rank());
  box const own = d.owned_box();
  std::fill(a.begin(), a.end(), std::nan(""));
  std::fill(b.begin(), b.end(), std::nan(""));
  if (al.empty()) return;
  auto const& n = d.shape();
  auto const& st = d.strides();
  for (index_t i = al.lo[0]; i < al.hi[0]; ++i)
    for (index_t j = al.lo[1]; j < al.hi[1]; ++j)
      for (index_t k = al.lo[2]; k < al.hi[2]; ++k) {
        index_t const g[3] = {i, j, k};
        bool outside = false, owned = true;
        for (int x = 0; x < 3; ++x) {
          outside = outside || (!periodic[x] && (g[x] < 0 || g[x] >= n[x]));
          owned = owned && g[x] >= own.lo[x] && g[x] < own.hi[x];
        }
        auto const off = static_cast<std::size_t>((i - al.lo[0]) * st[0] + (j - al.lo[1]) * st[1] +
                                                  (k - al.lo[2]) * st[2]);
        if (outside)
          a[off] = b[off] = 0.0;
        else if (owned)
          a[off] =
              std::sin(0.05 * static_cast<double>(i)) * std::cos(0.07 * static_cast<double>(j)) +
              0.001 * static_cast<double>(k);
      }
}

// The owned cells of `buf`, row-major (for the bit-for-bit comparison between depths).
std::vector<double> owned_cells(halox::tensor_desc const& d, std::vector<double> const& buf) {
  std::vector<double> out;
  box const own = d.owned_box();
  if (own.empty()) return out;
  out.reserve(static_cast<std::size_t>(own.volume()));
  for (index_t i = own.lo[0]; i < own.hi[0]; ++i)
    for (index_t j = own.lo[1]; j < own.hi[1]; ++j)
      for (index_t k = own.lo[2]; k < own.hi[2]; ++k)
        out.push_back(buf[static_cast<std::size_t>(d.local_offset({i, j, k}))]);
  return out;
}

struct result {
  timing t;
  double msgs = 0, bytes = 0, redundant = 0;
  bool match = true;
};

// One depth's schedule, buffers and regions, built once and run at every latency.
struct runner {
  int depth;
  halox::deep_halo_schedule s;
  std::vector<double> b0, b1;
  std::vector<box> regions;
  std::vector<double>* cur = nullptr;
  std::vector<timing> runs;

  runner(halox::process_grid const& grid, args const& a, halox::halo_options const& ho, int k)
      : depth(k), s(grid, a.shape, halox::dtype::float64, {1, 1, 1}, k, dims_of(a), ho),
        b0(static_cast<std::size_t>(s.desc().local_elements())), b1(b0.size()) {
    for (int st = 1; st <= depth; ++st) regions.push_back(s.valid_region(st));
  }

  static std::vector<halox::dim_options> dims_of(args const& a) {
    std::vector<halox::dim_options> dims(3);
    for (int d = 0; d < 3; ++d) dims[d].periodic = a.periodic[d];
    return dims;
  }

  // One run of `steps` steps from the initial field; records max-over-ranks times per step.
  void run(args const& a, double latency_us, bool keep) {
    auto const& desc = s.desc();
    double const wait_us = latency_us * s.messages();
    initialise(desc, a.periodic, b0, b1);
    cur = &b0;
    std::vector<double>* nxt = &b1;
    MPI_Barrier(MPI_COMM_WORLD);
    double tex = 0, tco = 0;
    double const c0 = cpu_seconds();
    double const t0 = MPI_Wtime();
    for (int done = 0; done < a.steps; done += depth) {
      double const e0 = MPI_Wtime();
      busy_wait(wait_us);
      s.plan().execute(halox::tensor_view(desc, *cur));
      double const e1 = MPI_Wtime();
      tex += e1 - e0;
      int const m = std::min(depth, a.steps - done);
      for (int st = depth - m + 1; st <= depth; ++st) {
        jacobi(cur->data(), nxt->data(), regions[static_cast<std::size_t>(st - 1)], desc.strides());
        std::swap(cur, nxt);
      }
      tco += MPI_Wtime() - e1;
    }
    double loc[4] = {tex, tco, MPI_Wtime() - t0, cpu_seconds() - c0}, mx[4];
    MPI_Allreduce(loc, mx, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (keep) runs.push_back({mx[0] / a.steps, mx[1] / a.steps, mx[2] / a.steps, mx[3] / a.steps});
  }

  // The row of the table: the median run, counts over ranks, and the check against depth 1.
  result summarise(args const& a, std::vector<double>& reference) {
    auto const& desc = s.desc();
    result r;
    r.t = pick_run(runs, a.fastest);
    runs.clear();
    // Redundant share over all ranks: computed cells beyond depth x owned, per cycle.
    double loc[2] = {static_cast<double>(s.cells_computed()),
                     static_cast<double>(desc.owned_box().volume()) * depth},
           sum[2];
    MPI_Allreduce(loc, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    r.redundant = sum[0] > 0 ? 1.0 - sum[1] / sum[0] : 0.0;
    double per[2] = {static_cast<double>(s.messages()) / depth,
                     static_cast<double>(s.bytes()) / depth},
           mx[2];
    MPI_Allreduce(per, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    r.msgs = mx[0];
    r.bytes = mx[1];
    auto const got = owned_cells(desc, *cur);
    int bad = 0;
    if (reference.empty() && depth == 1)
      reference = got;
    else
      bad =
          got.size() != reference.size() ||
          (!got.empty() && std::memcmp(got.data(), reference.data(), got.size() * sizeof(double)));
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    r.match = any == 0;
    return r;
  }
};

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  args a;
  bool help = false;
  std::string problem = parse_args(argc, argv, a, help);
  halox::halo_options ho;
  if (problem.empty() && !help) {
    try {
      ho.method = halox::backend_from_string(a.backend);
    } catch (halox::error const& e) {
      problem = "--backend '" + a.backend + "' is invalid: " + e.message();
    }
  }
  if (help || !problem.empty()) {
    if (world_rank() == 0) {
      if (help)
        usage();
      else
        std::fprintf(stderr, "halox-bench-tiling: %s\n", problem.c_str());
    }
    MPI_Finalize();
    return help ? 0 : 2;
  }
  // Depth 1 first: it is the reference the other depths must match.
  std::sort(a.depths.begin(), a.depths.end());
  a.depths.erase(std::unique(a.depths.begin(), a.depths.end()), a.depths.end());
  if (a.depths.front() != 1) a.depths.insert(a.depths.begin(), 1);
  int status = 0;
  try {
    auto const grid = halox::process_grid::create(MPI_COMM_WORLD, {0, 0, 0}, a.shape, {1, 1, 1},
                                                  {1, 1, 1}, a.periodic);
    if (world_rank() == 0) {
      std::printf("halox-bench-tiling: %d ranks, grid %dx%dx%d, float64 %lldx%lldx%lld, periodic "
                  "%d,%d,%d, %d steps, %s of %d runs (+%d warmup), backend %s, load average %s\n\n",
                  grid.size(), grid.dims()[0], grid.dims()[1], grid.dims()[2],
                  static_cast<long long>(a.shape[0]), static_cast<long long>(a.shape[1]),
                  static_cast<long long>(a.shape[2]), int(a.periodic[0]), int(a.periodic[1]),
                  int(a.periodic[2]), a.steps, a.fastest ? "fastest" : "median", a.reps, a.warmup,
                  a.backend.c_str(), load_average().c_str());
      std::printf("| latency us | depth | msgs/step | bytes/step | exchange ms/step | compute "
                  "ms/step | total ms/step | cpu ms/step | redundant | speed-up | check |\n"
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    }
    std::vector<runner> runners;
    runners.reserve(a.depths.size());
    for (int k : a.depths) runners.emplace_back(grid, a, ho, k);
    std::vector<double> reference;
    for (double lat : a.latencies) {
      // The depths take turns run by run, so that a change of the machine's load while they
      // are measured falls on all of them alike.
      for (int run = 0; run < a.warmup + a.reps; ++run)
        for (auto& r : runners) r.run(a, lat, run >= a.warmup);
      double base = 0;
      for (auto& rn : runners) {
        result const r = rn.summarise(a, reference);
        if (rn.depth == 1) base = r.t.total;
        if (!r.match) status = 1;
        if (world_rank() == 0)
          std::printf(
              "| %g | %d | %.2f | %.0f | %.4f | %.4f | %.4f | %.4f | %.1f%% | %.2f | %s |\n", lat,
              rn.depth, r.msgs, r.bytes, 1e3 * r.t.exchange, 1e3 * r.t.compute, 1e3 * r.t.total,
              1e3 * r.t.cpu, 100 * r.redundant, r.t.total > 0 ? base / r.t.total : 0.0,
              r.match ? "ok" : "MISMATCH");
      }
    }
    if (world_rank() == 0) {
      std::printf("\nload average after: %s\n", load_average().c_str());
      if (status)
        std::fprintf(stderr, "halox-bench-tiling: a depth's result differs from depth 1's\n");
    }
  } catch (halox::error const& e) {
    // halox throws on every rank for invalid input (e.g. a depth too deep for the extent).
    if (world_rank() == 0) std::fprintf(stderr, "halox-bench-tiling: %s\n", e.message().c_str());
    status = e.code() == halox::errc::invalid_argument ? 2 : 1;
  }
  MPI_Finalize();
  return status;
}
