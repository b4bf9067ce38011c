#pragma once
// The scenario families of halox-bench; each registers its Google Benchmark entries. The cases
// a peer library is compared on (halox-bench-peers, bench/peers/) are listed here too, so that
// the peer entries and halox's twin scenarios come from one description.

#include "common/scenario.hpp"

#include <halox/distribution.hpp>

#include <string>
#include <vector>

namespace halox::bench {

/// Halo exchanges (halo_cases.cpp).
void register_halo_cases();
/// Redistributions (redist_cases.cpp); registers nothing when halox has no redistribute.hpp.
void register_redist_cases();

/// One ghost update of PETSc DMDA's geometry: a 3-D grid of `n`^3 points with `dof` doubles
/// per point, split over all ranks along one axis, stencil width `width`, no periodic axis
/// (DM_BOUNDARY_NONE). halox's twin has a halo only on the split axis: an axis without a
/// neighbour has no ghost layer in a DMDA either, so a face split along the slow axis is one
/// contiguous block in both. With one split axis a star and a box stencil need the same ghost
/// cells; both are listed so that each PETSc stencil has its twin under its own name.
struct dmda_case {
  std::string name; ///< scenario name, e.g. "halo/dmda_f64_256/box_w1/split_z"
  bool box = true;  ///< DMDA_STENCIL_BOX (false: DMDA_STENCIL_STAR)
  index_t n = 0;    ///< grid points per axis (z, y, x), after HALOX_BENCH_SCALE
  int dof = 1;      ///< doubles per grid point (the fastest tensor dimension when > 1)
  int width = 1;    ///< stencil width
  int split = 0;    ///< the axis split over the ranks: 0 = z (slowest), 2 = x (fastest)
};

/// The DMDA cases at this run's rank count and scale (halo_cases.cpp).
[[nodiscard]] std::vector<dmda_case> dmda_cases();
/// halox's twin scenario of a DMDA case, as halox-bench registers it.
[[nodiscard]] scenario_spec dmda_spec(dmda_case const& c);

/// FFTW-MPI's transpose: an `n` x `n` double matrix from row blocks to column blocks.
struct transpose_case {
  std::string name; ///< "redist/transpose_f64_4096/rows_to_cols"
  index_t n = 0;    ///< after HALOX_BENCH_SCALE
};

/// True when halox has redistribution (include/halox/redistribute.hpp), so that the transpose
/// twin exists.
[[nodiscard]] bool has_redistribute() noexcept;
/// The transpose case at this run's scale (redist_cases.cpp).
[[nodiscard]] transpose_case transpose_of();
/// halox's twin scenario of the transpose, as halox-bench registers it (needs
/// has_redistribute()).
[[nodiscard]] scenario_spec transpose_spec();

} // namespace halox::bench
