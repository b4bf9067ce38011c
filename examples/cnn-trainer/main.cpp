// halox-train: trains a CNN whose activations are split over samples and space with halox's
// distributed operators. See docs/trainer.md.
#include "model.hpp"
#include "options.hpp"
#include "threads.hpp"
#include "train.hpp"

#include <halox/error.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

// OpenMP reads OMP_NUM_THREADS once, when the runtime starts, and the trainer links no OpenMP
// of its own to change it later; so --threads (and --deterministic) set the variable and
// re-execute the program before MPI is initialised. Returns only when nothing needs changing.
//
// Without either, and without OMP_NUM_THREADS, OpenMP would start one thread per CPU the process
// may run on. A launcher that does not bind its ranks (MPICH's Hydra by default, Open MPI when
// oversubscribing) gives every rank the whole node, so ranks x threads would oversubscribe the
// cores, and OpenMP's spin-waiting threads then make a step many times slower (64 steps of
// alexnet-hybrid on 2 ranks of a 2-core node: 25 s instead of 0.44 s). The default then shares
// the node's CPUs among the launcher's ranks on it (halox::ops::default_threads()), and the
// header says so.
void apply_threads(int argc, char** argv) {
  std::string want;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      want = argv[i + 1];
    else if (a.rfind("--threads=", 0) == 0)
      want = a.substr(10);
    else if (a == "--deterministic" && want.empty())
      want = "1";
  }
  if (!want.empty() && std::atoi(want.c_str()) < 1) return; // bad values: parse_options says so
  char const* have = std::getenv("OMP_NUM_THREADS");
  if (want.empty()) {
    if (have) return;
    halox::ops::thread_default const d = halox::ops::default_threads();
    if (d.threads == 0) return; // bound to its own CPUs, or alone: OpenMP's default fits
    want = std::to_string(d.threads);
    setenv(trainer::default_threads_variable, (want + "|" + d.reason).c_str(), 1);
  }
  if (have && want == have) return;
  setenv("OMP_NUM_THREADS", want.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the threads we have.
}

void report_error(std::string const& msg, bool every_rank, int rank) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (every_rank)
    std::fprintf(stderr, "[%d/%d] halox-train: error: %s\n", rank, size, msg.c_str());
  else if (rank == 0)
    std::fprintf(stderr, "halox-train: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

} // namespace

int main(int argc, char** argv) {
  // Buffers of a MiB or more come from mmap and go back to the system when freed: glibc would
  // otherwise raise its threshold after the first such free and keep later ones in its heap,
  // where a network rebuilt for another batch size leaves the pages of the old one resident.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  apply_threads(argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  // With --debug-print every rank reports the error, which shows that each of them stopped.
  bool every_rank = false;
  for (int i = 1; i < argc; ++i)
    every_rank = every_rank || std::strcmp(argv[i], "--debug-print") == 0;
  try {
    trainer::options const o = trainer::parse_options({argv + 1, argv + argc});
    if (o.help) {
      if (rank == 0) std::fputs(trainer::usage().c_str(), stdout);
    } else if (o.list_models) {
      if (rank == 0)
        for (auto const& n : trainer::builtin_model_names()) {
          auto const m = trainer::resolve_model(n);
          std::string in;
          for (auto e : m.input) in += (in.empty() ? "" : "x") + std::to_string(e);
          std::printf("%-16s %zu layers, input %s, %d classes, strategy %s\n", n.c_str(),
                      m.layers.size(), in.c_str(), m.classes, m.strategy.c_str());
        }
    } else {
      trainer::model_spec const m = trainer::resolve_model(o.model);
      std::string const dtype = o.dtype.empty() ? m.dtype : o.dtype;
      status = dtype == "float64" ? trainer::train<double>(o, m, MPI_COMM_WORLD)
                                  : trainer::train<float>(o, m, MPI_COMM_WORLD);
    }
  } catch (halox::error const& e) {
    // A bad option, model or file: the message says what and how to fix it, and the decoration
    // of what() (category, rank, source line) would only bury it. Other categories keep it.
    bool const user = e.code() == halox::errc::invalid_argument;
    report_error(user ? e.message() : std::string(e.what()), every_rank, rank);
    status = 2;
  } catch (std::exception const& e) {
    // Option, model and set-up errors are raised identically on every rank (pure parsing, or
    // halox's collective checks), so every rank stops here and none waits for the others.
    report_error(e.what(), every_rank, rank);
    status = 2;
  }
  MPI_Finalize();
  return status;
}
