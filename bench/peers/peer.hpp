#pragma once
// halox-bench-peers: other libraries' implementations of halox-bench scenarios, timed exactly
// like halox-bench's entries (common/mpi_bench.hpp: same warm-up, same fixed iteration count,
// each iteration the slowest rank's time, median) and next to halox itself.
//
// Each peer entry is named `<halox scenario>/<peer>` (e.g.
// `halo/dmda_f64_256/box_w1/split_x/petsc_g2l`). Between its own iterations it times, outside
// its own timing, halox's twin (the scenario's `auto` plan) and the twin's transport limit
// (and, for redistributions, its MPI_Alltoall baseline), so that halox / peer is a ratio of
// measurements taken under the same machine load. Before timing, every entry checks the peer's
// result once (known values in, the expected ones out); a mismatch skips the entry and makes
// the program exit with status 1.

#include "cases.hpp"
#include "common/mpi_bench.hpp"

#include <functional>
#include <memory>
#include <string>

namespace halox::bench::peers {

/// A peer library's operation on one case (built collectively, on every rank).
struct peer_op {
  /// The operation timed, e.g. DMGlobalToLocalBegin + DMGlobalToLocalEnd.
  std::function<void()> run;
  /// Collective: writes known values, runs the operation once and checks what arrived. Returns
  /// "" or this rank's first mismatch.
  std::function<std::string()> verify;
  /// Bytes of this rank's owned block the peer copies besides the exchange (PETSc copies the
  /// owned block between its global and its ghosted local vector); 0 when none. Reported as the
  /// time of a memcpy of that size (`owned_copy_us`).
  double owned_copy_bytes = 0;
  /// Shown in the entry's label, e.g. the planner flags used.
  std::string label;
  /// Owns the library objects `run` and `verify` refer to.
  std::shared_ptr<void> keep;
};

/// Registers `<twin.name>/<suffix>`: `make` builds the peer's operation, `twin` halox's
/// scenario, both for every entry run (memory is held by one entry at a time).
void register_peer(scenario_spec const& twin, std::string const& suffix,
                   std::function<peer_op()> make);

/// False when some peer's check failed in this run.
[[nodiscard]] bool all_verified() noexcept;

/// PETSc DMDA's ghost update on every DMDA case (petsc_cases.cpp; built with PETSc).
void register_petsc_cases();
/// FFTW-MPI's transpose on the transpose case (fftw_cases.cpp; built with FFTW-MPI).
void register_fftw_cases();

} // namespace halox::bench::peers
