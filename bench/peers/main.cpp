// halox-bench-peers: PETSc DMDA's ghost update and FFTW-MPI's transpose on halox-bench's
// scenarios, each entry timed like halox-bench's and next to halox's twin (peer.hpp). Run it
// under mpiexec like halox-bench; the usual Google Benchmark flags work. Exit status 1 when a
// peer's result check failed, 2 for an invalid flag or HALOX_BENCH_* setting.
#include "peers/peer.hpp"

#if HALOX_PEERS_PETSC
#include <petscsys.h>
#endif
#if HALOX_PEERS_FFTW
#include <fftw3-mpi.h>
#endif

#include <cstdio>

int main(int argc, char** argv) {
  halox::bench::init(&argc, &argv);
#if HALOX_PEERS_PETSC
  // MPI is already initialised: PETSc then runs on MPI_COMM_WORLD and leaves MPI_Finalize to
  // us. No arguments: the command line belongs to Google Benchmark (PETSC_OPTIONS still works).
  if (PetscInitializeNoArguments() != 0) {
    std::fprintf(stderr, "halox-bench-peers: PetscInitialize failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // Errors come back as codes (turned into exceptions that skip the entry), not as aborts.
  PetscPushErrorHandler(PetscReturnErrorHandler, nullptr);
  halox::bench::peers::register_petsc_cases();
#endif
#if HALOX_PEERS_FFTW
  fftw_mpi_init();
  halox::bench::peers::register_fftw_cases();
#endif
  int const rc = halox::bench::run_and_finalize(argc, argv, [] {
#if HALOX_PEERS_PETSC
    PetscFinalize();
#endif
#if HALOX_PEERS_FFTW
    fftw_mpi_cleanup();
#endif
  });
  if (rc != 0) return rc;
  return halox::bench::peers::all_verified() ? 0 : 1;
}
