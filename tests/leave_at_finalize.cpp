// A rank that leaves a plan without executing it, by destroying the plan and its context
// ("destroy") or by finalising MPI with the plan still alive ("finalize"), while the other
// ranks execute it: they must raise errc::peer_failed naming it within seconds, not wait for
// the watchdog (set to 60 s here). And at the end every rank finalises: nothing hangs.
//
// "together" and "together-alive" are the normal endings: every rank executes the plan as often,
// then destroys it and its context, or finalises with them alive; nothing may be reported
// (the tests fail on any warning printed).
//
//   mpiexec -n 2..4 halox_leave_at_finalize destroy|finalize|together|together-alive
#include <halox/halox.hpp>

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string const mode = argc > 1 ? argv[1] : "";
  bool const together = mode == "together" || mode == "together-alive";
  if ((mode != "destroy" && mode != "finalize" && !together) || size < 2 || size > 4) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mpiexec -n 2..4 %s destroy|finalize|together|together-alive\n",
                   argv[0]);
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  {
    // Periodic in both dimensions of a near-square grid: at 2 to 4 ranks every rank exchanges
    // with every other.
    std::vector<int> dims = size == 4 ? std::vector<int>{2, 2} : std::vector<int>{size, 1};
    auto ctx = std::make_unique<halox::context>(MPI_COMM_WORLD);
    halox::process_grid g(MPI_COMM_WORLD, dims);
    halox::tensor_desc const t(
        g, {8, 8}, halox::dtype::float64,
        {halox::dim_options::halo(1, true), halox::dim_options::halo(1, true)});
    halox::halo_options o;
    o.method = halox::backend::mpi_pack;
    auto plan = std::make_unique<halox::halo_plan>(*ctx, t, o);
    std::vector<double> x(t.local_elements(), 1.0);
    plan->execute(halox::tensor_view(t, x));
    if (together) {
      plan->execute(halox::tensor_view(t, x));
      plan->execute_reverse(halox::tensor_view(t, x));
      if (mode == "together-alive") {
        (void)plan.release();
        (void)ctx.release();
      }
      plan.reset();
      ctx.reset();
      MPI_Finalize();
      return 0;
    }
    if (rank == 1) {
      if (mode == "destroy") {
        plan.reset();
        ctx.reset();
      } else {
        (void)plan.release(); // still alive when MPI_Finalize runs
        (void)ctx.release();
      }
      MPI_Finalize();
      return 0;
    }
    double const t0 = MPI_Wtime();
    try {
      plan->execute(halox::tensor_view(t, x));
      std::fprintf(stderr, "rank %d: the execution succeeded without rank 1\n", rank);
      status = 1;
    } catch (halox::error const& e) {
      double const took = MPI_Wtime() - t0;
      std::string const what = mode == "destroy" ? "destroyed the plan" : "finalised MPI";
      bool const ok = e.code() == halox::errc::peer_failed &&
                      std::string(e.message()).find("rank 1 of its communicator left this plan") !=
                          std::string::npos &&
                      std::string(e.message()).find(what) != std::string::npos && took < 10.0;
      std::printf("rank %d: %s after %.2f s: %s\n", rank, ok ? "told" : "NOT TOLD", took,
                  e.message().c_str());
      if (!ok) status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
