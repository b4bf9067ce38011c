// halox-bench: halo-exchange and redistribution scenarios over MPI_COMM_WORLD, each with its
// same-run limits (see common/scenario.hpp and docs/bench.md). Run it under mpiexec; the usual
// Google Benchmark flags work (--benchmark_filter, --benchmark_format=json, --benchmark_out).
#include "cases.hpp"
#include "common/mpi_bench.hpp"

int main(int argc, char** argv) {
  halox::bench::init(&argc, &argv);
  halox::bench::register_halo_cases();
  halox::bench::register_redist_cases();
  return halox::bench::run_and_finalize(argc, argv);
}
