// halox-bench-ops: a distributed convolution layer, forward + backward, with overlap on (the
// interior always split off) and off, and measured (the layer keeps the faster of the two,
// dist_options::overlap_trials = 3, its measuring calls added to the warm-up);
// with --case lrn, LRN across channels instead (float 8x96x56x56, size 5, AlexNet's parameters),
// which --split c splits along the channels (channel halo exchanges).
//
// For each case (2-D: float 8x64x256x256, 3x3, 64 -> 64; 3-D: float 2x32x64x64x64, 3x3x3,
// 32 -> 32; spatial extents scaled by HALOX_BENCH_SCALE), each compute provider (--provider; by
// default the reference kernels and every fast host provider built) and each overlap setting, runs
// `warmup` untimed steps and `iters` timed steps. Each step is MPI_Barrier, forward, backward;
// each phase's times are reduced with MPI_Allreduce(MAX) over ranks (the slowest rank sets the
// pace of a synchronous layer), and the medians over steps are reported. Every rank runs the
// same number of steps, fixed by the command line.
//
// Reported per line, in ms: step (forward + backward), forward, backward, compute (kernels),
// wait (blocked in the exchange: communication not hidden), reduce (dw/db all-reduce), cpu (the
// largest CPU time of a rank per step: on a shared machine it shows how the work divides when
// other jobs distort the wall times), and the bytes this rank sends per step. After both
// overlap settings, "hidden" is the share of the exchange wait that overlap removed from the
// critical path: 1 - wait(on) / wait(off). Speed-ups between rank counts come from running the
// tool at each count (see docs/dist_ops.md).
//
// With --provider cudnn (CUDA builds with cuDNN) the layer's buffers are device memory, the
// exchanges use --method (staged_mpi by default; cuda_aware_mpi or nccl where the MPI or the
// node allow), and every phase ends with cudaDeviceSynchronize so that its time includes the
// device work it queued. Each rank uses device (rank mod device count).
#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include <mpi.h>

#ifdef HALOX_BENCH_OPS_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;

struct args {
  std::string which = "all";    // 2d | 3d | all
  std::string split = "space";  // space | n | auto
  std::string overlap = "both"; // on | off | both | measured | all
  std::string provider = "all"; // a compute provider, or all built host providers
  std::string method;           // backend of the exchanges; empty: mpi_pack, or staged_mpi
  int iters = 5, warmup = 1;
  double scale = 1.0;
};

struct sample {
  double step = 0, fwd = 0, bwd = 0, compute = 0, wait = 0, reduce = 0, cpu = 0;
};

// CPU time of this process (all its threads): on a shared machine, where other jobs take cores
// away, it shows how the work divides even when wall times cannot.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

sample median(std::vector<sample> const& s) {
  auto pick = [&](double sample::*f) {
    std::vector<double> v;
    for (auto const& x : s) v.push_back(x.*f);
    return median(v);
  };
  return {pick(&sample::step), pick(&sample::fwd),    pick(&sample::bwd), pick(&sample::compute),
          pick(&sample::wait), pick(&sample::reduce), pick(&sample::cpu)};
}

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string dims_str(std::vector<int> const& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

// The layer's buffers: host vectors, or device copies of them for a device provider.
struct buffers {
  std::vector<std::vector<float>> host;
  std::vector<float*> ptr;
  bool device = false;
  buffers(std::vector<std::vector<float>> h, bool dev) : host(std::move(h)), device(dev) {
    for (auto& v : host) {
      float* p = v.data();
#ifdef HALOX_BENCH_OPS_CUDA
      if (device) {
        p = nullptr;
        if (cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(v.size(), 1) * 4) !=
                cudaSuccess ||
            cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
          std::fprintf(stderr, "halox-bench-ops: cannot place %zu floats on the device\n",
                       v.size());
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      }
#endif
      ptr.push_back(p);
    }
  }
  ~buffers() {
#ifdef HALOX_BENCH_OPS_CUDA
    if (device)
      for (float* p : ptr) cudaFree(p);
#endif
  }
  buffers(buffers const&) = delete;
  buffers& operator=(buffers const&) = delete;
  // Waits for the device work queued so far (a no-op on host buffers).
  void sync() const {
#ifdef HALOX_BENCH_OPS_CUDA
    if (device) cudaDeviceSynchronize();
#endif
  }
};

// The overlap settings: off, on (the interior always split off) and measured (the layer times
// both and keeps the faster; dist_options::overlap_trials).
enum { mode_off = 0, mode_on = 1, mode_measured = 2 };
char const* mode_name(int m) { return m == mode_off ? "off" : m == mode_on ? "on" : "measured"; }
ops::dist_options options_for(int mode) {
  ops::dist_options o;
  o.overlap = mode != mode_off;
  o.overlap_trials = mode == mode_measured ? 3 : 0;
  return o;
}
// Untimed steps: --warmup, plus the measured calls, so that the timed steps run the choice.
int warmup_steps(args const& a, ops::dist_options const& o) {
  return a.warmup + (o.overlap_trials > 0 ? 2 + 2 * o.overlap_trials : 0);
}

// Runs the timed steps. An error there may strike one rank only (a device fault): its peers
// raise peer_failed, but the exchanges they left pending point into buffers freed while the
// error unwinds, so the job stops at once rather than finalising. (Errors while the layers are
// built are collective and end the run with status 2 instead.)
template <class F> void steps_or_abort(F&& steps) {
  try {
    steps();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "halox-bench-ops: rank %d: error while running the layers: %s\n", rank(),
                 e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

// Runs one case at one overlap setting; returns the median sample (max over ranks per step).
sample run(std::vector<index_t> const& shape, index_t cout, std::vector<int> const& dims, int mode,
           ops::compute_provider prov, args const& a, double& bytes) {
  int const nsp = static_cast<int>(shape.size()) - 2;
  bool const device = ops::provider_memory(prov) == halox::memory_space::device;
  halox::process_grid grid(MPI_COMM_WORLD, dims);
  halox::tensor_desc xd(grid, shape, halox::dtype::float32);
  std::vector<index_t> ws{cout, shape[1]};
  for (int i = 0; i < nsp; ++i) ws.push_back(3);
  ops::dist_options o = options_for(mode);
  o.provider = prov;
  o.method = !a.method.empty() ? halox::backend_from_string(a.method)
             : device          ? halox::backend::staged_mpi
                               : halox::backend::mpi_pack;
  ops::dist_conv<float> layer(xd, ws, {{}, {1}, {1}, {}}, o);
  auto const& in = layer.input_desc();
  auto const& out = layer.output_desc();
  std::vector<float> x(static_cast<std::size_t>(in.local_elements()));
  std::vector<float> y(static_cast<std::size_t>(out.local_elements()));
  std::vector<float> dy(y.size()), dx(static_cast<std::size_t>(xd.local_elements()));
  std::vector<float> w(static_cast<std::size_t>(ops::element_count(ws))), b(cout), dw(w.size()),
      db(b.size());
  std::mt19937 g(1234 + static_cast<unsigned>(rank()));
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&x, &dy, &w, &b})
    for (auto& e : *v) e = u(g);
  buffers B({x, y, dy, dx, w, b, dw, db}, device);
  auto view = [&](halox::tensor_desc const& d, int i) {
    return halox::tensor_view(d, B.ptr[i], B.host[i].size() * sizeof(float));
  };
  halox::tensor_view const xv = view(in, 0), yv = view(out, 1), dyv = view(out, 2),
                           dxv = view(xd, 3);
  float *const wp = B.ptr[4], *const bp = B.ptr[5], *const dwp = B.ptr[6], *const dbp = B.ptr[7];
  std::vector<sample> samples;
  int const warmup = warmup_steps(a, o);
  steps_or_abort([&] {
    for (int it = 0; it < warmup + a.iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      double const c0 = cpu_seconds();
      double const t0 = MPI_Wtime();
      layer.forward(xv, {wp, ws}, bp, yv);
      B.sync();
      ops::dist_timings const f = layer.timings();
      double const t1 = MPI_Wtime();
      layer.backward(xv, dyv, {wp, ws}, dxv, {dwp, ws}, dbp);
      B.sync();
      ops::dist_timings const bk = layer.timings();
      double const t2 = MPI_Wtime();
      double const c2 = cpu_seconds();
      double loc[7] = {t2 - t0,          t1 - t0,   t2 - t1, f.compute + bk.compute,
                       f.wait + bk.wait, bk.reduce, c2 - c0};
      double mx[7];
      MPI_Allreduce(loc, mx, 7, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= warmup) samples.push_back({mx[0], mx[1], mx[2], mx[3], mx[4], mx[5], mx[6]});
    }
  });
  bytes = static_cast<double>(layer.bytes_sent());
  return median(samples);
}

// One LRN case at one overlap setting, as `run` does the convolution.
sample run_lrn(std::vector<index_t> const& shape, std::vector<int> const& dims, int mode,
               ops::compute_provider prov, args const& a, double& bytes) {
  halox::process_grid grid(MPI_COMM_WORLD, dims);
  halox::tensor_desc xd(grid, shape, halox::dtype::float32);
  ops::dist_options o = options_for(mode);
  o.provider = prov;
  o.method = a.method.empty() ? halox::backend::mpi_pack : halox::backend_from_string(a.method);
  ops::dist_lrn<float> layer(xd, {5, 1e-4, 0.75, 2.0}, o);
  auto const& in = layer.input_desc();
  auto const& out = layer.output_desc();
  std::vector<float> x(static_cast<std::size_t>(in.local_elements()));
  std::vector<float> y(static_cast<std::size_t>(out.local_elements())), dy(y.size()), dx(y.size());
  std::mt19937 g(1234 + static_cast<unsigned>(rank()));
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&x, &dy})
    for (auto& e : *v) e = u(g);
  halox::tensor_view const xv(in, x), yv(out, y), dyv(out, dy), dxv(out, dx);
  std::vector<sample> samples;
  int const warmup = warmup_steps(a, o);
  steps_or_abort([&] {
    for (int it = 0; it < warmup + a.iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      double const c0 = cpu_seconds();
      double const t0 = MPI_Wtime();
      layer.forward(xv, yv);
      ops::dist_timings const f = layer.timings();
      double const t1 = MPI_Wtime();
      layer.backward(xv, dyv, dxv);
      ops::dist_timings const bk = layer.timings();
      double const t2 = MPI_Wtime();
      double const c2 = cpu_seconds();
      double loc[7] = {t2 - t0,          t1 - t0, t2 - t1, f.compute + bk.compute,
                       f.wait + bk.wait, 0,       c2 - c0};
      double mx[7];
      MPI_Allreduce(loc, mx, 7, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= warmup) samples.push_back({mx[0], mx[1], mx[2], mx[3], mx[4], mx[5], mx[6]});
    }
  });
  bytes = static_cast<double>(layer.bytes_sent());
  return median(samples);
}

void usage() {
  std::printf(
      "halox-bench-ops [--case 2d|3d|all|lrn] [--split space|n|c|auto]\n"
      "                [--overlap on|off|both|measured|all] [--iters N] [--warmup N]\n"
      "                [--provider all|automatic|reference|onednn|cudnn] [--method BACKEND]\n"
      "Distributed conv layer (forward + backward), float, per compute provider. HALOX_BENCH_SCALE "
      "scales the\n"
      "spatial extents (2-D 256x256, 3-D 64^3 at scale 1). Run at 1, 2, 4 ranks and compare the\n"
      "step times for speed-ups. cudnn runs on device buffers; --method names the exchanges'\n"
      "backend (default mpi_pack on host, staged_mpi on device). --case lrn: LRN across channels\n"
      "(8x96x56x56 at scale 1, size 5) instead of the convolution; --split c splits its "
      "channels.\n");
}

} // namespace

// `text` as a whole number in [lo, hi], or an error message naming the option, the value and
// the range (atoi would turn a typo into 0 and a huge value into anything).
std::string parse_count(char const* name, std::string const& text, long lo, long hi, int& out) {
  char* end = nullptr;
  errno = 0;
  long const v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || v < lo || v > hi)
    return std::string(name) + " '" + text + "' is invalid: expected a whole number from " +
           std::to_string(lo) + " to " + std::to_string(hi);
  out = static_cast<int>(v);
  return {};
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  args a;
  std::string problem;
  if (char const* s = std::getenv("HALOX_BENCH_SCALE"); s && *s) {
    char* end = nullptr;
    a.scale = std::strtod(s, &end);
    if (end != s + std::strlen(s) || !std::isfinite(a.scale) || a.scale <= 0 || a.scale > 1e6)
      problem = std::string("HALOX_BENCH_SCALE '") + s +
                "' is invalid: expected a number above 0 and at most 1e6";
  }
  for (int i = 1; i < argc && problem.empty(); ++i) {
    std::string const k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--case")
      a.which = next();
    else if (k == "--split")
      a.split = next();
    else if (k == "--overlap") {
      a.overlap = next();
      if (a.overlap != "on" && a.overlap != "off" && a.overlap != "both" &&
          a.overlap != "measured" && a.overlap != "all")
        problem = "--overlap " + a.overlap + ": use on, off, both (on and off), measured or all";
    } else if (k == "--iters")
      problem = parse_count("--iters", next(), 1, 1000000, a.iters);
    else if (k == "--warmup")
      problem = parse_count("--warmup", next(), 0, 1000000, a.warmup);
    else if (k == "--provider")
      a.provider = next();
    else if (k == "--method")
      a.method = next();
    else {
      if (rank() == 0) usage();
      MPI_Finalize();
      return k == "--help" ? 0 : 2;
    }
  }
  if (!problem.empty()) {
    if (rank() == 0) std::fprintf(stderr, "halox-bench-ops: %s\n", problem.c_str());
    MPI_Finalize();
    return 2;
  }
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  auto sc = [&](index_t e) { return std::max<index_t>(8, std::llround(e * a.scale)); };
  struct bench_case {
    char const* name;
    std::vector<index_t> shape;
    index_t cout;
  };
  std::vector<bench_case> cases;
  if (a.which == "2d" || a.which == "all") cases.push_back({"2d", {8, 64, sc(256), sc(256)}, 64});
  if (a.which == "3d" || a.which == "all")
    cases.push_back({"3d", {2, 32, sc(64), sc(64), sc(64)}, 32});
  if (a.which == "lrn") cases.push_back({"lrn", {8, 96, sc(56), sc(56)}, 96});
  // Compute providers to compare: "all" runs every one built for float on host memory.
  std::vector<ops::compute_provider> provs;
  if (a.provider == "all") {
    provs.push_back(ops::compute_provider::reference);
    if (ops::provider_built(ops::compute_provider::onednn))
      provs.push_back(ops::compute_provider::onednn);
  } else {
    try {
      provs.push_back(
          ops::resolve_provider(ops::provider_from_string(a.provider), halox::dtype::float32));
      if (!a.method.empty()) (void)halox::backend_from_string(a.method);
#ifdef HALOX_BENCH_OPS_CUDA
      int n = 0;
      if (ops::provider_memory(provs.back()) == halox::memory_space::device &&
          cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
        cudaSetDevice(rank() % n);
#endif
    } catch (halox::error const& e) {
      if (rank() == 0) std::fprintf(stderr, "halox-bench-ops: %s\n", e.what());
      MPI_Finalize();
      return 2;
    }
  }
  if (rank() == 0)
    std::printf("# halox-bench-ops: %d rank(s), scale %g, %d timed step(s) after %d warm-up; "
                "times in ms, max over ranks, median over steps\n"
                "# %-4s %-10s %-9s %-8s %9s %9s %9s %9s %9s %9s %9s %12s\n",
                p, a.scale, a.iters, a.warmup, "case", "grid", "provider", "overlap", "step",
                "forward", "backward", "compute", "wait", "reduce", "cpu", "bytes/rank");
  for (auto const& c : cases) {
    int const nd = static_cast<int>(c.shape.size());
    std::vector<int> dims(static_cast<std::size_t>(nd), 0);
    dims[1] = 1;
    if (a.split == "space") dims[0] = 1;
    if (a.split == "n")
      for (int d = 2; d < nd; ++d) dims[d] = 1;
    bool const lrn = std::string(c.name) == "lrn";
    std::vector<int> halo(static_cast<std::size_t>(nd), 1);
    halo[0] = halo[1] = 0;
    if (a.split == "c") { // LRN's channel split: the channels over every rank
      dims.assign(static_cast<std::size_t>(nd), 1);
      dims[1] = p;
    } else {
      dims = halox::choose_grid(p, dims, c.shape, halo, halo);
    }
    for (auto const prov : provs) {
      double wait[3] = {-1, -1, -1};
      for (int mode : {mode_on, mode_off, mode_measured}) {
        bool const wanted = a.overlap == "all" || a.overlap == mode_name(mode) ||
                            (a.overlap == "both" && mode != mode_measured);
        if (!wanted) continue;
        double bytes = 0;
        sample s;
        try {
          s = lrn ? run_lrn(c.shape, dims, mode, prov, a, bytes)
                  : run(c.shape, c.cout, dims, mode, prov, a, bytes);
        } catch (halox::error const& e) { // building the layers: collective (e.g. no GPU here)
          if (rank() == 0) std::fprintf(stderr, "halox-bench-ops: %s\n", e.what());
          MPI_Finalize();
          return 2;
        }
        wait[mode] = s.wait;
        if (rank() == 0)
          std::printf("  %-4s %-10s %-9s %-8s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %12.0f\n",
                      c.name, dims_str(dims).c_str(), ops::to_string(prov).c_str(), mode_name(mode),
                      1e3 * s.step, 1e3 * s.fwd, 1e3 * s.bwd, 1e3 * s.compute, 1e3 * s.wait,
                      1e3 * s.reduce, 1e3 * s.cpu, bytes);
      }
      if (rank() == 0 && wait[0] > 0 && wait[1] >= 0)
        std::printf("  %-4s %-9s hidden: %.0f%% of the exchange wait (%.2f ms off -> %.2f ms on)\n",
                    c.name, ops::to_string(prov).c_str(), 100.0 * (1.0 - wait[1] / wait[0]),
                    1e3 * wait[0], 1e3 * wait[1]);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
